"""DuckLake upkeep between CDC batches: purge old tombstones, flush inlined rows to Parquet,
merge small files, rewrite files that are mostly deleted rows, expire old snapshots and delete
the files only they referenced.

A snapshot is never expired while a manifest references it (``mirror.manifests.snapshot_id``,
plus any the caller protects), nor while it is the latest, nor within ``retain_s`` of its
commit (a curation that just pinned it is still reading).

A tombstone (a deleted row kept so that an older change replayed later cannot revive it) is
purged only once it is older than the position the warehouse had both ``retain_s`` ago and at
the oldest snapshot a live manifest pins: replays and re-deliveries reach back less far than
that, and time travel to any kept snapshot still sees the tombstone (the purge is a new commit).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection

import duckdb

from warehouse.base import MaintenanceReport
from warehouse.ducklake.statements import ident, literal

#: Author of the commits that purge tombstones: data versions skip them (no data changed).
MAINTENANCE_AUTHOR = "quarry-maintenance"


def maintain_lake(
    con: duckdb.DuckDBPyConnection,
    alias: str,
    tables: Collection[str],
    *,
    retain_s: float,
    rewrite_threshold: float = 0.95,
    protect: Collection[int] = (),
) -> MaintenanceReport:
    """Run the upkeep on the writer connection ``con`` (outside a transaction) over the
    mirrored ``tables`` (schema ``mirror``); files with more than ``rewrite_threshold`` of
    their rows deleted are rewritten, then small files merged."""
    started = time.monotonic()
    name = literal(alias)
    referenced = _referenced(con)
    purged = purge_tombstones(con, alias, tables, retain_s=retain_s, pinned=referenced)
    con.execute(f"CALL ducklake_flush_inlined_data({name})")
    con.execute(
        f"CALL ducklake_rewrite_data_files({name}, delete_threshold => $1)", [rewrite_threshold]
    )
    con.execute(f"CALL ducklake_merge_adjacent_files({name})")
    protected = referenced | {int(s) for s in protect}
    expired = _expirable(con, alias, retain_s, protected)
    if expired:
        con.execute(
            f"CALL ducklake_expire_snapshots({name}, versions => $1::UBIGINT[])", [list(expired)]
        )
        con.execute(f"CALL ducklake_cleanup_old_files({name}, cleanup_all => true)")
    return MaintenanceReport(
        tuple(expired), tuple(sorted(protected)), time.monotonic() - started, purged
    )


def purge_tombstones(
    con: duckdb.DuckDBPyConnection,
    alias: str,
    tables: Collection[str],
    *,
    retain_s: float,
    pinned: Collection[int] = (),
) -> int:
    """Delete tombstones older than the purge horizon (see the module docstring) in one
    commit; returns how many were deleted."""
    horizon = _purge_horizon(con, alias, retain_s, pinned)
    if horizon is None or not tables:
        return 0
    con.execute("BEGIN TRANSACTION")
    try:
        purged = 0
        for table in sorted(tables):
            target = ".".join(ident(p) for p in (alias, "mirror", table))
            row = con.execute(
                f"DELETE FROM {target} WHERE _deleted AND _lsn < $1", [horizon]
            ).fetchone()
            purged += int(row[0]) if row else 0
        message = literal(f"purged {purged} tombstones older than LSN {horizon}")
        con.execute(
            f"CALL {ident(alias)}.set_commit_message({literal(MAINTENANCE_AUTHOR)}, {message})"
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return purged


def _purge_horizon(
    con: duckdb.DuckDBPyConnection, alias: str, retain_s: float, pinned: Collection[int]
) -> int | None:
    """The lowest of: the CDC position ``retain_s`` ago, and the position at the oldest
    pinned snapshot. ``None`` (no purge) while either is unknown."""
    snapshots = f"{ident(alias)}.snapshots()"
    aged = con.execute(
        f"SELECT commit_extra_info FROM {snapshots} WHERE commit_extra_info IS NOT NULL "
        "AND snapshot_time < now() - to_microseconds(CAST($1 * 1e6 AS BIGINT)) "
        "ORDER BY snapshot_id DESC LIMIT 1",
        [retain_s],
    ).fetchone()
    horizon = _lsn(aged)
    if horizon is None:
        return None
    if pinned:
        at_pin = con.execute(
            f"SELECT commit_extra_info FROM {snapshots} WHERE commit_extra_info IS NOT NULL "
            "AND snapshot_id <= $1 ORDER BY snapshot_id DESC LIMIT 1",
            [min(pinned)],
        ).fetchone()
        pinned_lsn = _lsn(at_pin)
        horizon = None if pinned_lsn is None else min(horizon, pinned_lsn)
    return horizon


def _lsn(row: tuple[object, ...] | None) -> int | None:
    """The position's ``commit_lsn`` from a commit's extra info (the position document)."""
    if row is None or row[0] is None:
        return None
    try:
        return int(json.loads(str(row[0]))["commit_lsn"])
    except (ValueError, KeyError, TypeError):
        return None


def _referenced(con: duckdb.DuckDBPyConnection) -> set[int]:
    rows = con.execute(
        "SELECT DISTINCT snapshot_id FROM mirror.manifests "
        "WHERE NOT _deleted AND snapshot_id IS NOT NULL"
    ).fetchall()
    return {int(r[0]) for r in rows}


def _expirable(
    con: duckdb.DuckDBPyConnection, alias: str, retain_s: float, protected: set[int]
) -> list[int]:
    rows = con.execute(
        f"SELECT snapshot_id FROM {ident(alias)}.snapshots() "
        "WHERE snapshot_time < now() - to_microseconds(CAST($1 * 1e6 AS BIGINT)) "
        f"AND snapshot_id < (SELECT max(snapshot_id) FROM {ident(alias)}.snapshots()) "
        "ORDER BY snapshot_id",
        [retain_s],
    ).fetchall()
    return [int(r[0]) for r in rows if int(r[0]) not in protected]
