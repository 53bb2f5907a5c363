"""The initial snapshot: every published table read inside the slot's exported snapshot.

The slot is created first with ``SNAPSHOT 'export'``; the readers ``SET TRANSACTION SNAPSHOT``
to it, so the rows they read are exactly the database at the slot's consistent point and the
stream continues right after it: no gap, no duplicate. Tables are read with ``COPY ... CSV``
(Postgres text forms, parsed by Arrow in C++) and loaded in one warehouse commit; a table of
more than ``snapshot_split_pages`` pages is read in page ranges by parallel workers.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import sql

from cdc.config import CdcConfig
from cdc.slot import ExportedSnapshot, drop_slot, exported_snapshot
from cdc.source import Connection, connect, preflight, publication_tables, qualified
from warehouse.base import Warehouse
from warehouse.changes import Position, SnapshotChunk, TableSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotReport:
    position: Position
    snapshot_id: int
    rows: int
    seconds: float


@dataclass(frozen=True)
class _Part:
    """One COPY: a whole table, or one page range of it."""

    spec: TableSpec
    namespace: str
    name: str
    pages: tuple[int, int | None] | None = None


def take_snapshot(dsn: str, warehouse: Warehouse, config: CdcConfig) -> SnapshotReport:
    """Create the slot (replacing a stale one), load every published table as of its
    consistent point in one warehouse commit, and return the position the stream starts at."""
    with connect(dsn) as conn:
        preflight(conn, config)
        drop_slot(conn, config.slot)
        # Every transaction committed before now is in the snapshot: the warehouse's data
        # is complete through this source time (what its lag is measured from).
        row = conn.execute(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
        ).fetchone()
    with exported_snapshot(dsn, config.slot) as exported:
        position = Position(
            lsn=exported.consistent_lsn,
            snapshot_lsn=exported.consistent_lsn,
            slot=config.slot,
            commit_ts_ms=int(row[0]) if row else None,
        )
        return _load(dsn, warehouse, config, exported, position, None)


def load_tables(
    dsn: str, warehouse: Warehouse, config: CdcConfig, names: Collection[str], position: Position
) -> SnapshotReport:
    """Load the current rows of the published tables ``names`` (a backfill), versioned at the
    consistent point of a temporary slot's exported snapshot: every streamed change committed
    after it is newer and wins, every one before it is older and is already in the rows read.
    The warehouse's position stays ``position``; the stream goes on around the load."""
    slot = f"{config.slot}_backfill"
    with exported_snapshot(dsn, slot, temporary=True) as exported:
        return _load(dsn, warehouse, config, exported, position, set(names))


def _load(
    dsn: str,
    warehouse: Warehouse,
    config: CdcConfig,
    exported: ExportedSnapshot,
    position: Position,
    only: set[str] | None,
) -> SnapshotReport:
    started = time.monotonic()
    with _SnapshotReaders(dsn, exported.snapshot_name, config.snapshot_workers) as readers:
        tables = publication_tables(readers.main, config.publication)
        tables = [t for t in tables if only is None or t[0].name in only]
        if only is not None and not tables:  # none of them is published any more
            return SnapshotReport(position, warehouse.current_snapshot(), 0, 0.0)
        for spec, _, _ in tables:
            warehouse.ensure_table(spec)
        parts = _plan(readers.main, tables, config.snapshot_split_pages, config.snapshot_workers)
        counter = _Counter()
        chunks = counter.count(readers.chunks(parts, config.snapshot_batch_bytes))
        snapshot_id = warehouse.apply_snapshot(
            [t[0].name for t in tables], chunks, position, version_lsn=exported.consistent_lsn
        )
    seconds = time.monotonic() - started
    log.info(
        "%s: %d rows of %d tables (%d reads) in %.2f s",
        "initial snapshot" if only is None else "backfill",
        counter.rows,
        len(tables),
        len(parts),
        seconds,
    )
    return SnapshotReport(position, snapshot_id, counter.rows, seconds)


class _Counter:
    rows = 0

    def count(self, chunks: Iterator[SnapshotChunk]) -> Iterator[SnapshotChunk]:
        for chunk in chunks:
            self.rows += chunk.rows.num_rows
            yield chunk


def _plan(
    conn: Connection, tables: list[tuple[TableSpec, int, int]], split_pages: int, workers: int
) -> list[_Part]:
    parts = []
    for spec, oid, pages in tables:
        row = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.oid = %s",
            (oid,),
        ).fetchone()
        assert row is not None
        namespace, name = str(row[0]), str(row[1])
        if pages <= split_pages or workers == 1:
            parts.append(_Part(spec, namespace, name))
            continue
        step = max(split_pages, -(-pages // workers))
        bounds = list(range(0, pages, step))
        for i, start in enumerate(bounds):
            end = bounds[i + 1] if i + 1 < len(bounds) else None
            parts.append(_Part(spec, namespace, name, (start, end)))
    return parts


class _SnapshotReaders:
    """``workers`` sessions, each in a REPEATABLE READ transaction on the exported snapshot."""

    def __init__(self, dsn: str, snapshot_name: str, workers: int) -> None:
        self._dsn, self._name, self._workers = dsn, snapshot_name, workers
        self._conns: list[Connection] = []

    def __enter__(self) -> _SnapshotReaders:
        for _ in range(self._workers):
            conn = connect(self._dsn)
            self._conns.append(conn)
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(self._name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self._conns:
            conn.close()

    @property
    def main(self) -> Connection:
        return self._conns[0]

    def chunks(self, parts: list[_Part], batch_bytes: int) -> Iterator[SnapshotChunk]:
        """Chunks of every part, in order; parts are read by the workers in parallel."""
        if len(self._conns) == 1:
            for part in parts:
                yield from _read_part(self._conns[0], part, batch_bytes)
            return
        with ThreadPoolExecutor(len(self._conns)) as pool:
            for start in range(0, len(parts), len(self._conns)):
                group = parts[start : start + len(self._conns)]
                futures = [
                    pool.submit(_read_all, conn, part, batch_bytes)
                    for conn, part in zip(self._conns, group, strict=False)
                ]
                for future in futures:
                    yield from future.result()


def _read_all(conn: Connection, part: _Part, batch_bytes: int) -> list[SnapshotChunk]:
    return list(_read_part(conn, part, batch_bytes))


def _read_part(conn: Connection, part: _Part, batch_bytes: int) -> Iterator[SnapshotChunk]:
    names = [c.name for c in part.spec.columns]
    with conn.cursor() as cur, cur.copy(_copy_statement(part)) as copy:
        stream = _CopyStream(copy)
        if stream.at_end():
            return  # an empty table (Arrow refuses an empty CSV)
        reader = pacsv.open_csv(
            io.BufferedReader(stream, buffer_size=1 << 20),
            read_options=pacsv.ReadOptions(column_names=names, block_size=batch_bytes),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()),
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        for batch in reader:
            yield SnapshotChunk(part.spec.name, pa.Table.from_batches([batch]))


def _copy_statement(part: _Part) -> sql.Composed:
    columns = sql.SQL(", ").join(_column_text(c.name, c.pg_type) for c in part.spec.columns)
    where: sql.Composable = sql.SQL("")
    if part.pages is not None:
        start, end = part.pages
        where = sql.SQL(" WHERE ctid >= {}::tid").format(sql.Literal(f"({start},0)"))
        if end is not None:
            where += sql.SQL(" AND ctid < {}::tid").format(sql.Literal(f"({end},0)"))
    return sql.SQL("COPY (SELECT {} FROM {}{}) TO STDOUT WITH (FORMAT csv)").format(
        columns, qualified(part.namespace, part.name), where
    )


def _column_text(name: str, pg_type: str) -> sql.Composable:
    """The column in the text form the warehouse casts from: arrays as JSON, bytea as hex."""
    column = sql.Identifier(name)
    if pg_type.endswith("[]"):
        return sql.SQL("to_json({})::text").format(column)
    if pg_type == "bytea":
        return sql.SQL("encode({}, 'hex')").format(column)
    return column


class _CopyStream(io.RawIOBase):
    """COPY output as a readable binary stream for Arrow's CSV reader."""

    def __init__(self, copy: Any) -> None:
        self._blocks = iter(copy)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def at_end(self) -> bool:
        while not self._pending:
            block = next(self._blocks, None)
            if block is None:
                return True
            self._pending = bytes(block)
        return False

    def readinto(self, buffer: Any) -> int:
        if self.at_end():
            return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
