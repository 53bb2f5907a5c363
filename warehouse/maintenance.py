"""DuckLake upkeep between CDC batches: flush inlined rows to Parquet, merge small files,
expire old snapshots and delete the files only they referenced.

A snapshot is never expired while a manifest references it (``mirror.manifests.snapshot_id``,
plus any the caller protects), nor while it is the latest, nor within ``retain_s`` of its
commit (a curation that just pinned it is still reading).
"""

from __future__ import annotations

import time
from collections.abc import Collection

import duckdb

from warehouse.base import MaintenanceReport
from warehouse.statements import ident, literal


def maintain_lake(
    con: duckdb.DuckDBPyConnection, alias: str, *, retain_s: float, protect: Collection[int] = ()
) -> MaintenanceReport:
    """Run the upkeep on the writer connection ``con`` (outside a transaction)."""
    started = time.monotonic()
    name = literal(alias)
    con.execute(f"CALL ducklake_flush_inlined_data({name})")
    con.execute(f"CALL ducklake_merge_adjacent_files({name})")
    protected = _referenced(con) | {int(s) for s in protect}
    expired = _expirable(con, alias, retain_s, protected)
    if expired:
        con.execute(
            f"CALL ducklake_expire_snapshots({name}, versions => $1::UBIGINT[])", [list(expired)]
        )
        con.execute(f"CALL ducklake_cleanup_old_files({name}, cleanup_all => true)")
    return MaintenanceReport(tuple(expired), tuple(sorted(protected)), time.monotonic() - started)


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
