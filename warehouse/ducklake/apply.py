"""Writing staged rows into a mirrored table, on the writer connection inside its transaction.

A staged row replaces the stored one only when its version ``(_lsn, _seq)`` is newer. DuckLake
updates are a delete plus an insert anyway, so a batch is applied as exactly that, with one
scan of the stored table that reads only its key and version columns: a probe joins the staged
keys to the stored ones (their ``rowid`` and whether the staged version is newer), then the
replaced rows are deleted by ``rowid`` and the staged rows inserted, but those older than what
is stored. The old MERGE read every column of every stored row.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.base import MirrorTable
from warehouse.ducklake.statements import (
    DOOMED,
    KEPT,
    ROW,
    SKIPPED,
    STAGE,
    delete_rows_statement,
    insert_statement,
    kept_statement,
    probe_statement,
    truncate_statement,
)
from warehouse.rows import KEEP


def apply_rows(
    con: duckdb.DuckDBPyConnection,
    target: str,
    table: MirrorTable,
    staged: pa.Table,
    truncated_at: tuple[int, int] | None = None,
) -> None:
    """Apply one table's staged rows (:mod:`warehouse.rows`, snapshot chunks): one probe of
    the stored keys and versions, a delete by ``rowid`` of the rows replaced, an insert of
    the staged rows not older than what is stored."""
    if truncated_at is not None:
        con.execute(truncate_statement(target), list(truncated_at))
    staged = _after_truncate(staged, table.truncated_at)
    if staged.num_rows == 0:
        return
    columns = [(n, t) for n, t in table.columns if n in staged.schema.names]
    staged = staged.append_column(ROW, pa.array(np.arange(staged.num_rows, dtype=np.int64)))
    kept = _has_keep(staged)
    with _registered(con, STAGE, staged):
        if kept:
            saved = con.execute(kept_statement(target, columns, table.key))
            con.register(KEPT, saved.to_arrow_table())
        try:
            hits = con.execute(probe_statement(target, columns, table.key)).to_arrow_table()
            replaces = hits.column("replaces")
            with _registered(con, DOOMED, hits.filter(replaces).select(["rid"])):
                con.execute(delete_rows_statement(target))
            skipped = hits.filter(pc.invert(replaces)).select(["row"])
            with _registered(con, SKIPPED, skipped):
                insert = insert_statement(target, columns, table.key, kept=kept)
                con.execute(insert)
        finally:
            if kept:
                con.unregister(KEPT)


@contextmanager
def _registered(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> Iterator[None]:
    con.register(name, rows)
    try:
        yield
    finally:
        con.unregister(name)


def insert_rows(
    con: duckdb.DuckDBPyConnection, target: str, table: MirrorTable, staged: pa.Table
) -> None:
    """Insert staged rows into a table known to hold none of their keys (an initial load)."""
    if staged.num_rows == 0:
        return
    columns = [(n, t) for n, t in table.columns if n in staged.schema.names]
    with _registered(con, STAGE, staged):
        con.execute(insert_statement(target, columns, table.key, kept=False, skip=False))


def _after_truncate(staged: pa.Table, truncated_at: tuple[int, int] | None) -> pa.Table:
    """The staged rows newer than the table's last truncate (older ones stay dropped)."""
    if truncated_at is None or staged.num_rows == 0:
        return staged
    lsn, seq = staged.column("_lsn"), staged.column("_seq")
    newer = pc.or_(
        pc.greater(lsn, pa.scalar(truncated_at[0], pa.uint64())),
        pc.and_(
            pc.equal(lsn, pa.scalar(truncated_at[0], pa.uint64())),
            pc.greater(seq, pa.scalar(truncated_at[1], pa.int32())),
        ),
    )
    return staged.filter(newer)


def _has_keep(staged: pa.Table) -> bool:
    """Whether some staged row keeps a stored value (``_keep`` is null when it keeps none)."""
    keep = staged.column(KEEP)
    return bool(keep.null_count < len(keep))
