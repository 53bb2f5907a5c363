"""Writing staged rows into a mirrored table, on the writer connection inside its transaction.

A staged row replaces the stored one only when its version ``(_lsn, _seq)`` is newer. DuckLake
updates are a delete plus an insert anyway, so a batch is applied as exactly that: one
``DELETE ... USING`` the staged rows (a scan of the key and version columns only), then one
``INSERT ... WHERE NOT EXISTS`` (what is still stored for a key after the delete is newer or
equal, and wins). Reading only narrow columns of the stored table keeps a batch's cost low as
the table grows; the old MERGE read every column of every stored row.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from warehouse.staging import KEEP
from warehouse.statements import (
    KEPT,
    STAGE,
    delete_statement,
    insert_statement,
    kept_statement,
    truncate_statement,
)


@dataclass(frozen=True)
class MirrorTable:
    """A mirrored table: source columns with their DuckDB types, and its key."""

    name: str
    columns: tuple[tuple[str, str], ...]  # (name, DuckDB type), source columns only
    key: tuple[str, ...]

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]


def apply_rows(
    con: duckdb.DuckDBPyConnection,
    target: str,
    table: MirrorTable,
    staged: pa.Table,
    truncated_at: tuple[int, int] | None = None,
) -> None:
    """Apply one table's staged rows (see :mod:`warehouse.staging`, :mod:`warehouse.rows`)."""
    if truncated_at is not None:
        con.execute(truncate_statement(target), list(truncated_at))
    if staged.num_rows == 0:
        return
    columns = [(n, t) for n, t in table.columns if n in staged.schema.names]
    kept = _has_keep(staged)
    con.register(STAGE, staged)
    try:
        if kept:
            saved = con.execute(kept_statement(target, columns, table.key, staged.schema))
            con.register(KEPT, saved.to_arrow_table())
        con.execute(delete_statement(target, columns, table.key, staged.schema))
        con.execute(insert_statement(target, columns, table.key, staged.schema, kept=kept))
    finally:
        con.unregister(STAGE)
        if kept:
            con.unregister(KEPT)


def insert_rows(
    con: duckdb.DuckDBPyConnection, target: str, table: MirrorTable, staged: pa.Table
) -> None:
    """Insert staged rows into a table known to hold none of their keys (an initial load)."""
    if staged.num_rows == 0:
        return
    columns = [(n, t) for n, t in table.columns if n in staged.schema.names]
    con.register(STAGE, staged)
    try:
        con.execute(
            insert_statement(target, columns, table.key, staged.schema, kept=False, guard=False)
        )
    finally:
        con.unregister(STAGE)


def snapshot_rows(rows: pa.Table, lsn: int) -> pa.Table:
    """Initial-snapshot text rows with their version ``(lsn, 0)`` and the staging columns."""
    n = rows.num_rows
    return (
        rows.append_column("_lsn", pa.array(np.full(n, lsn, np.uint64)))
        .append_column("_seq", pa.array(np.zeros(n, np.int32)))
        .append_column("_deleted", pa.array(np.zeros(n, np.bool_)))
        .append_column(KEEP, pa.nulls(n, pa.list_(pa.string())))
    )


def _has_keep(staged: pa.Table) -> bool:
    """Whether some staged row keeps a stored value (``_keep`` is null when it keeps none)."""
    keep = staged.column(KEEP)
    return bool(keep.null_count < len(keep))
