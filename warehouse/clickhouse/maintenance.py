"""ClickHouse upkeep: expire old snapshots and delete the row versions no kept snapshot reads.

Every version of every row is kept until this runs, which is what lets a read pin any
snapshot. Kept snapshots: the latest, those committed within ``retain_s``, those a live
manifest references (``manifests.snapshot_id``) and those the caller protects; the others
are expired (their ``commits`` row deleted, so a pinned read of them fails). With ``H`` the
oldest kept snapshot, a version is deleted when a newer version of its key was committed at
or before ``H`` (no kept snapshot can see it), and a tombstone when it was committed before
``H`` (as on DuckLake, an older replay arriving later could then revive its row; replays do
not reach back that far). ClickHouse merges parts in the background by itself. The entries
of the purged versions in the tables' superseded lists (:mod:`warehouse.clickhouse.superseded`)
go after the versions: a crash in between leaves entries of versions that no longer exist,
which hide nothing and go in the next run (the other order could revive a version).

Each mirrored table's current data version is never expired either (a curation pins the
data version of the tables it reads; see :func:`table_versions`), but it does not hold back
``H``: read at its data version or later, a table shows the rows it shows now, which the
purge keeps. Such a snapshot is exact for the tables whose data it versions (and every table
not changed since), which is all a data version is read for.

The change log (``table_changes``, one row per table a commit wrote) is trimmed with the
expired snapshots to the rows some kept snapshot's data version still reads, so it does not
grow with every batch.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence

from clickhouse_connect.driver.client import Client

from warehouse.base import MaintenanceReport, MirrorTable
from warehouse.clickhouse.meta import SCHEMA_CHANGE
from warehouse.clickhouse.schema import Databases, quote
from warehouse.clickhouse.superseded import list_name, listed_tables, orphans_statement


def maintain_clickhouse(
    client: Client,
    names: Databases,
    tables: Collection[MirrorTable],
    *,
    retain_s: float,
    protect: Collection[int] = (),
) -> MaintenanceReport:
    """Run the upkeep (see the module docstring) on the writer ``client``."""
    started = time.monotonic()
    commits = names.ident(names.meta, "commits")
    rows = client.query(
        f"SELECT snapshot, committed_at >= now64(6) - toIntervalMillisecond({{ms:UInt64}}) "
        f"FROM {commits} ORDER BY snapshot",
        parameters={"ms": int(retain_s * 1000)},
    ).result_rows
    if not rows:
        return MaintenanceReport((), (), time.monotonic() - started)
    existing = {int(s) for s, _ in rows}
    latest = max(existing)
    young = {int(s) for s, recent in rows if recent}
    protected = _referenced(client, names, latest) | {int(s) for s in protect}
    keep = {latest} | young | (protected & existing)
    horizon = min(keep)
    versions = table_versions(client, names, [t.name for t in tables], latest) & existing
    protected |= versions
    expired = sorted(existing - keep - versions)
    purged = sum(_purge(client, names, table, horizon) for table in tables)
    listed = listed_tables(client, names)
    for table in tables:
        if table.name in listed:
            _purge_list(client, names, table)
    if expired:
        client.command(
            f"DELETE FROM {commits} WHERE has({{e:Array(UInt64)}}, snapshot)", {"e": expired}
        )
        _trim_changes(client, names, existing - set(expired), min(young | {latest}))
    return MaintenanceReport(
        tuple(expired), tuple(sorted(protected)), time.monotonic() - started, purged
    )


def _trim_changes(client: Client, names: Databases, kept: set[int], recent: int) -> None:
    """Delete the ``table_changes`` rows that no kept snapshot's data version reads.

    A data version at snapshot ``s`` is each table's last change at or before ``s``, so a
    change of a table is still read when some kept snapshot lies between it and that table's
    next change; otherwise no kept snapshot can see it. Every snapshot from ``recent`` (the
    oldest one kept for its age, or the latest) on is kept, so only changes before it are
    looked at, against the few older snapshots kept for manifests and data versions.
    """
    older = [*sorted(s for s in kept if s < recent), recent]
    changes = names.ident(names.meta, "table_changes")
    client.command(
        f"DELETE FROM {changes} WHERE (table_name, _commit) IN (SELECT table_name, _commit "
        "FROM (SELECT table_name, _commit, leadInFrame(_commit, 1, toUInt64(-1)) OVER "
        "(PARTITION BY table_name ORDER BY _commit ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) "
        f"AS next FROM {changes}) WHERE _commit < {{recent:UInt64}} "
        "AND arrayFirst(s -> s >= _commit, {older:Array(UInt64)}) >= next)",
        {"recent": recent, "older": older},
    )


def _referenced(client: Client, names: Databases, latest: int) -> set[int]:
    """Snapshots that live manifests pin."""
    rows = client.query(
        f"SELECT DISTINCT snapshot_id FROM {names.ident(names.views, 'manifests')}"
        "(snapshot = {s:UInt64}) WHERE snapshot_id IS NOT NULL",
        parameters={"s": latest},
    ).result_rows
    return {int(r[0]) for r in rows}


def table_versions(client: Client, names: Databases, tables: Collection[str], at: int) -> set[int]:
    """Each mirrored table's data version at ``at``: its last commit that changed it or the
    schema (what ``ClickHouseWarehouse.data_version`` answers for it)."""
    rows = client.query(
        f"SELECT table_name, max(_commit) FROM {names.ident(names.meta, 'table_changes')} "
        "WHERE _commit <= {at:UInt64} GROUP BY table_name",
        parameters={"at": at},
    ).result_rows
    last = {str(name): int(commit) for name, commit in rows}
    schema = last.get(SCHEMA_CHANGE, 0)
    versions = {max(last.get(name, 0), schema) for name in tables}
    return {v for v in versions if v > 0}


def doomed_statement(target: str, key: Sequence[str]) -> str:
    """Versions no snapshot at or after ``h`` reads: superseded by then, or tombstones
    older than it (parameter ``h``)."""
    keys = ", ".join(quote(k) for k in key)
    return (
        f"SELECT {keys}, _lsn, _seq, _deleted FROM (SELECT {keys}, _lsn, _seq, _deleted, "
        f"_commit, max((_lsn, _seq)) OVER (PARTITION BY {keys}) AS _top FROM {target} "
        "WHERE _commit <= {h:UInt64}) "
        "WHERE (_lsn, _seq) < _top OR (_deleted AND _commit < {h:UInt64})"
    )


def _purge_list(client: Client, names: Databases, table: MirrorTable) -> None:
    """Delete the superseded-list entries of one table's versions that were purged."""
    listing = names.ident(names.meta, list_name(table.name))
    if int(client.query(f"SELECT count() FROM {listing}").result_rows[0][0]):
        client.command(orphans_statement(names.ident(names.mirror, table.name), listing, table.key))


def _purge(client: Client, names: Databases, table: MirrorTable, horizon: int) -> int:
    """Delete one table's unreadable versions; returns the tombstones among them."""
    target = names.ident(names.mirror, table.name)
    doomed = doomed_statement(target, table.key)
    parameters = {"h": horizon}
    counted = client.query(
        f"SELECT count(), countIf(_deleted) FROM ({doomed})", parameters=parameters
    ).result_rows
    if not int(counted[0][0]):
        return 0
    keys = ", ".join(quote(k) for k in table.key)
    client.command(
        f"DELETE FROM {target} WHERE ({keys}, _lsn, _seq) IN "
        f"(SELECT {keys}, _lsn, _seq FROM ({doomed}))",
        parameters,
    )
    return int(counted[0][1])
