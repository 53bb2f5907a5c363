"""The DuckLake backend: the embedded default.

The lake's catalog lives in a Postgres database and its data as Parquet under ``data_path``,
so the CDC writer, the service and notebooks can use it from separate processes at once. Each
write here is one DuckLake commit (one snapshot) that also carries the CDC position, both in
``quarry_meta.cdc_position`` and in the commit's extra info.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from warehouse.base import MaintenanceReport, Warehouse
from warehouse.changes import ChangeBatch, Position, SnapshotChunk, TableSpec
from warehouse.config import WarehouseConfig
from warehouse.connection import attach_lake, new_database
from warehouse.ddl import SQL_ROOT, pending, sql_files
from warehouse.errors import SchemaError, WarehouseError, WarehouseUnavailableError
from warehouse.maintenance import maintain_lake
from warehouse.reader import LakeReader
from warehouse.staging import KEEP, TableStage, stage_events, stage_to_arrow
from warehouse.statements import (
    STAGE,
    ident,
    literal,
    merge_statement,
    stale_rows_statement,
    table_ref,
    truncate_statement,
)
from warehouse.types import duckdb_type
from warehouse.versions import last_change, view_tables

MIRROR = "mirror"
META = "quarry_meta"
_META_COLUMNS = ("_lsn", "_seq", "_deleted")
_TERMINAL = (
    duckdb.BinderException,
    duckdb.ParserException,
    duckdb.ConversionException,
    duckdb.CatalogException,
    duckdb.ConstraintException,
    duckdb.InvalidInputException,
)


@dataclass(frozen=True)
class MirrorTable:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, DuckDB type), source columns only
    key: tuple[str, ...]


class DuckLakeWarehouse(Warehouse):
    """DuckLake warehouse. Connections open lazily: constructing one connects to nothing.

    The writer and the reader are separate DuckDB instances; a process that only reads (the
    service) never opens the writer.
    """

    def __init__(self, config: WarehouseConfig, *, sql_dir: Path | None = None) -> None:
        self._config = config
        self._sql_dir = sql_dir or SQL_ROOT / "ducklake"
        self._reader = LakeReader(config)
        self._writer: duckdb.DuckDBPyConnection | None = None
        self._tables: dict[str, MirrorTable] | None = None
        self._lock = threading.RLock()

    @property
    def config(self) -> WarehouseConfig:
        return self._config

    # -- writer --------------------------------------------------------------------------

    def _writer_connection(self) -> duckdb.DuckDBPyConnection:
        if self._writer is None:
            self._config.data_path.mkdir(parents=True, exist_ok=True)
            con = new_database(self._config.writer_threads)
            try:
                attach_lake(con, self._config, read_only=False)
            except BaseException:
                con.close()
                raise
            self._writer = con
        return self._writer

    @contextmanager
    def _transaction(self, what: str) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            con = self._writer_connection()
            try:
                con.execute("BEGIN TRANSACTION")
                yield con
                con.execute("COMMIT")
            except duckdb.Error as error:
                self._drop_writer()
                retryable = not isinstance(error, _TERMINAL)
                kind = WarehouseUnavailableError if retryable else WarehouseError
                raise kind(
                    f"{what} failed: {error}", retryable=retryable, alias=self._config.alias
                ) from error
            except BaseException:
                self._drop_writer()
                raise

    def _drop_writer(self) -> None:
        """Forget the writer connection; the next write reconnects, which also recovers from a
        restarted catalog database."""
        if self._writer is not None:
            # Roll back explicitly first: closing a connection whose transaction cannot be
            # rolled back (catalog server gone) aborts the process inside DuckDB.
            with contextlib.suppress(duckdb.Error):
                self._writer.execute("ROLLBACK")
            self._writer.close()
            self._writer = None
        self._tables = None

    def bootstrap(self) -> None:
        with self._transaction("bootstrap") as con:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {META}")
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {META}.applied_sql "
                "(name VARCHAR, sha256 VARCHAR, applied_at TIMESTAMPTZ)"
            )
            rows = con.execute(f"SELECT name, sha256 FROM {META}.applied_sql").fetchall()
            todo = pending(sql_files(self._sql_dir), {str(n): str(d) for n, d in rows})
            for item in todo:
                con.execute(item.text)
                con.execute(f"DELETE FROM {META}.applied_sql WHERE name = $1", [item.name])
                con.execute(
                    f"INSERT INTO {META}.applied_sql VALUES ($1, $2, now())",
                    [item.name, item.sha256],
                )
            if todo:
                names = ", ".join(item.name for item in todo)
                con.execute(
                    f"CALL {ident(self._config.alias)}.set_commit_message("
                    f"'quarry', {literal('warehouse bootstrap: ' + names)})"
                )
        self._tables = None

    def _mirror_tables(self, con: duckdb.DuckDBPyConnection) -> dict[str, MirrorTable]:
        if self._tables is None:
            keys = dict(
                con.execute(f"SELECT table_name, key_columns FROM {META}.mirror_tables").fetchall()
            )
            columns: dict[str, list[tuple[str, str]]] = {}
            for table, column, duck_type in con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() "
                "WHERE database_name = $1 AND schema_name = $2 ORDER BY column_index",
                [self._config.alias, MIRROR],
            ).fetchall():
                if column not in _META_COLUMNS:
                    columns.setdefault(table, []).append((column, duck_type))
            self._tables = {
                name: MirrorTable(name, tuple(columns[name]), tuple(key))
                for name, key in keys.items()
                if name in columns
            }
        return self._tables

    def mirrored_tables(self) -> dict[str, tuple[str, ...]]:
        with self._lock:
            tables = self._mirror_tables(self._writer_connection())
            return {name: table.key for name, table in tables.items()}

    def ensure_table(self, spec: TableSpec) -> bool:
        with self._lock:
            known = self._mirror_tables(self._writer_connection()).get(spec.name)
            if known is not None:
                have = {name for name, _ in known.columns}
                missing = [c for c in spec.columns if c.name not in have]
                if not missing:
                    return False
            with self._transaction(f"schema change of {spec.name}") as con:
                target = table_ref(self._config.alias, MIRROR, spec.name)
                if known is None:
                    self._create_table(con, target, spec)
                else:
                    for column in missing:
                        con.execute(
                            f"ALTER TABLE {target} ADD COLUMN {ident(column.name)} "
                            f"{duckdb_type(column.pg_type)}"
                        )
            self._tables = None
            return True

    def _create_table(self, con: duckdb.DuckDBPyConnection, target: str, spec: TableSpec) -> None:
        if not spec.key:
            raise SchemaError(
                f"table {spec.name!r} has no primary key or replica identity "
                "index; give it one to mirror it",
                table=spec.name,
            )
        columns = [f"{ident(c.name)} {duckdb_type(c.pg_type)}" for c in spec.columns]
        columns += ["_lsn UBIGINT", "_seq INTEGER", "_deleted BOOLEAN"]
        con.execute(f"CREATE TABLE {target} ({', '.join(columns)})")
        con.execute(
            f"INSERT INTO {META}.mirror_tables VALUES ($1, $2)", [spec.name, list(spec.key)]
        )

    def apply(self, batch: ChangeBatch) -> int:
        with self._lock:
            with self._transaction("applying a CDC batch") as con:
                tables = self._mirror_tables(con)
                stages = stage_events(batch.events, {n: t.key for n, t in tables.items()})
                for name, stage in stages.items():
                    self._apply_stage(con, tables[name], stage)
                self._write_position(con, batch.position, f"cdc batch: {len(batch.events)} changes")
            return self._last_snapshot()

    def _apply_stage(
        self, con: duckdb.DuckDBPyConnection, table: MirrorTable, stage: TableStage
    ) -> None:
        target = table_ref(self._config.alias, MIRROR, table.name)
        if stage.truncated_at is not None:
            con.execute(truncate_statement(target), list(stage.truncated_at))
        if stage.rows:
            self._merge(con, target, table, stage_to_arrow(stage, table.columns, table.key))

    def _merge(
        self, con: duckdb.DuckDBPyConnection, target: str, table: MirrorTable, staged: pa.Table
    ) -> None:
        columns = [(n, t) for n, t in table.columns if n in staged.schema.names]
        con.register(STAGE, staged)
        try:
            con.execute(merge_statement(target, columns, table.key, staged.schema))
        finally:
            con.unregister(STAGE)

    def apply_snapshot(
        self, tables: Sequence[str], chunks: Iterable[SnapshotChunk], position: Position
    ) -> int:
        lsn = position.snapshot_lsn
        with self._lock:
            with self._transaction("loading the initial snapshot") as con:
                known = self._mirror_tables(con)
                for chunk in chunks:
                    if chunk.table not in known:
                        raise SchemaError(
                            f"snapshot of unknown table {chunk.table!r}", table=chunk.table
                        )
                    target = table_ref(self._config.alias, MIRROR, chunk.table)
                    self._merge(con, target, known[chunk.table], _snapshot_rows(chunk.rows, lsn))
                for name in tables:
                    target = table_ref(self._config.alias, MIRROR, name)
                    con.execute(stale_rows_statement(target), [lsn])
                self._write_position(con, position, f"initial snapshot of {len(tables)} tables")
            return self._last_snapshot()

    def _write_position(
        self, con: duckdb.DuckDBPyConnection, position: Position, message: str
    ) -> None:
        document = position.to_json()
        con.execute(f"DELETE FROM {META}.cdc_position")
        con.execute(f"INSERT INTO {META}.cdc_position VALUES ($1, now())", [document])
        con.execute(
            f"CALL {ident(self._config.alias)}.set_commit_message('quarry-cdc', "
            f"{literal(message)}, extra_info => {literal(document)})"
        )

    def _last_snapshot(self) -> int:
        with self._lock:
            con = self._writer_connection()
            row = con.execute(
                f"SELECT id FROM {ident(self._config.alias)}.last_committed_snapshot()"
            ).fetchone()
        if row is None or row[0] is None:
            raise WarehouseError("DuckLake reported no committed snapshot after a commit")
        return int(row[0])

    def maintain(self, *, protect: Collection[int] = ()) -> MaintenanceReport:
        """Flush inlined rows, merge small files, expire snapshots older than
        ``config.snapshot_retain_s`` that no manifest references; see
        :mod:`warehouse.maintenance`."""
        with self._lock:
            con = self._writer_connection()
            try:
                return maintain_lake(
                    con,
                    self._config.alias,
                    retain_s=self._config.snapshot_retain_s,
                    protect=protect,
                )
            except duckdb.Error as error:
                self._drop_writer()
                raise WarehouseUnavailableError(
                    f"warehouse maintenance failed: {error}", alias=self._config.alias
                ) from error

    # -- reader --------------------------------------------------------------------------

    def position(self, *, at: int | None = None) -> Position | None:
        pin = "" if at is None else f" AT (VERSION => {int(at)})"
        rows = self._reader.fetch(f"SELECT position FROM {META}.cdc_position{pin}")
        return Position.from_json(str(rows[0][0])) if rows else None

    def data_version(self, views: Collection[str], *, at: int | None = None) -> int:
        """The last snapshot at or before ``at`` (default: the current one) that changed the
        data behind ``views``; see :mod:`warehouse.versions`."""
        at = self.current_snapshot() if at is None else at
        alias = ident(self._config.alias)
        definitions = dict(
            self._reader.fetch(
                "SELECT view_name, sql FROM duckdb_views() WHERE database_name = $1",
                [self._config.alias],
            )
        )
        per_view = view_tables(definitions, MIRROR)
        names = {t for view in views for t in per_view.get(view, frozenset({view}))}
        ids = [
            str(row[0])
            for row in self._reader.fetch(
                f"SELECT t.table_id FROM __ducklake_metadata_{self._config.alias}.ducklake_table t"
                f" JOIN __ducklake_metadata_{self._config.alias}.ducklake_schema s"
                " USING (schema_id) WHERE s.schema_name = $1 AND t.end_snapshot IS NULL"
                " AND list_contains($2, t.table_name)",
                [MIRROR, sorted(names)],
            )
        ]
        snapshots = self._reader.fetch(
            f"SELECT snapshot_id, changes FROM {alias}.snapshots() WHERE snapshot_id <= $1", [at]
        )
        found = last_change([(int(s), dict(c or {})) for s, c in snapshots], ids)
        return at if found is None else found

    def current_snapshot(self) -> int:
        rows = self._reader.fetch(f"SELECT id FROM {ident(self._config.alias)}.current_snapshot()")
        return int(rows[0][0])

    def query_arrow(
        self,
        sql: str,
        *,
        snapshot_id: int | None = None,
        timeout_s: float | None = None,
        max_rows: int | None = None,
    ) -> pa.Table:
        """Run one read-only query on the lake's latest (or the given) snapshot.

        The reader is a separate DuckDB, attached read-only (through ``reader_catalog_dsn``
        when set) with external access off, files limited to the data path and a locked
        configuration. ``timeout_s`` (default ``config.query_timeout_s``) interrupts the query;
        more than ``max_rows`` rows (default ``config.max_rows``) raise ``RowLimitError``.
        """
        return self._reader.query_arrow(
            sql, snapshot_id=snapshot_id, timeout_s=timeout_s, max_rows=max_rows
        )

    def close(self) -> None:
        with self._lock:
            self._drop_writer()
        self._reader.close()


def _snapshot_rows(rows: pa.Table, lsn: int) -> pa.Table:
    n = rows.num_rows
    return (
        rows.append_column("_lsn", pa.array(np.full(n, lsn, np.uint64)))
        .append_column("_seq", pa.array(np.zeros(n, np.int32)))
        .append_column("_deleted", pa.array(np.zeros(n, np.bool_)))
        .append_column(KEEP, pa.nulls(n, pa.list_(pa.string())))
    )
