"""The DuckLake backend: the embedded default.

The lake's catalog lives in a Postgres database and its data as Parquet under ``data_path``,
so the CDC writer, the service and notebooks can use it from separate processes at once. Each
write here is one DuckLake commit (one snapshot) that also carries the CDC position, both in
``quarry_meta.cdc_position`` and in the commit's extra info.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from warehouse.base import MaintenanceReport, MirrorTable, Warehouse, known_table
from warehouse.changes import ChangeBatch, Position, SnapshotChunk, TableSpec
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.apply import apply_rows, insert_rows
from warehouse.ducklake.connection import (
    attach_lake,
    discard_connection,
    is_transient,
    new_database,
)
from warehouse.ducklake.flag_lists import EPISODES, FLAGS, LISTS, FlagLists
from warehouse.ducklake.lineage import LakeLineage
from warehouse.ducklake.maintenance import maintain_lake
from warehouse.ducklake.reader import LakeReader
from warehouse.ducklake.schema import SQL_DIR, apply_sql_files
from warehouse.ducklake.statements import ident, literal, stale_rows_statement, table_ref
from warehouse.ducklake.versions import LakeVersions
from warehouse.errors import SchemaError, WarehouseError, WarehouseUnavailableError
from warehouse.rows import META_COLUMNS, snapshot_rows
from warehouse.types import duckdb_type

MIRROR = "mirror"
META = "quarry_meta"


class DuckLakeWarehouse(Warehouse):
    """DuckLake warehouse. Connections open lazily: constructing one connects to nothing.

    The writer and the reader are separate DuckDB instances; a process that only reads (the
    service) never opens the writer.
    """

    #: The SQL dialect :meth:`query_arrow` takes (sqlglot's name).
    dialect = "duckdb"

    def __init__(self, config: DuckLakeConfig, *, sql_dir: Path | None = None) -> None:
        config.check_complete()
        self._config = config
        self._sql_dir = sql_dir or SQL_DIR
        self._reader = LakeReader(config)
        self._versions = LakeVersions(self._reader.fetch, config.alias, MIRROR)
        self._writer: duckdb.DuckDBPyConnection | None = None
        self._lineage = LakeLineage(config)
        self._tables: dict[str, MirrorTable] | None = None
        self._keeps_lists = False  # whether the lake has mirror.episode_flag_lists (0008)
        self._lists = FlagLists(config.alias)
        self._lock = threading.RLock()

    @property
    def config(self) -> DuckLakeConfig:
        return self._config

    # -- writer --------------------------------------------------------------------------

    def _writer_connection(self) -> duckdb.DuckDBPyConnection:
        if self._writer is None:
            if self._config.data_url is None:
                self._config.lake_data_path.mkdir(parents=True, exist_ok=True)
            con = new_database(self._config.writer_threads, s3=self._config.data_url is not None)
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
                self._drop_writer(error)
                raise self._failure(what, error) from error
            except BaseException:
                self._drop_writer()
                raise

    def _failure(self, what: str, error: duckdb.Error) -> WarehouseError:
        retryable = is_transient(error)
        kind = WarehouseUnavailableError if retryable else WarehouseError
        return kind(f"{what} failed: {error}", retryable=retryable, alias=self._config.alias)

    @contextmanager
    def _writer_use(self, what: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """The writer connection outside a transaction, with its errors classified."""
        with self._lock:
            try:
                yield self._writer_connection()
            except duckdb.Error as error:
                self._drop_writer(error)
                raise self._failure(what, error) from error

    def _drop_writer(self, error: BaseException | None = None) -> None:
        """Forget the writer connection; the next write reconnects, which also recovers from a
        restarted catalog database. The connection is rolled back and closed, or kept open
        when ``error`` says the catalog server went away (closing it then can abort the
        process inside DuckDB: :func:`warehouse.ducklake.connection.discard_connection`)."""
        if self._writer is not None:
            discard_connection(self._writer, error)
            self._writer = None
        self._tables = None

    def bootstrap(self) -> None:
        with self._transaction("bootstrap") as con:
            apply_sql_files(con, self._sql_dir, META, self._config.alias)
        self._tables = None

    def _mirror_tables(self, con: duckdb.DuckDBPyConnection) -> dict[str, MirrorTable]:
        if self._tables is None:
            registered = {
                str(name): (tuple(key), None if lsn is None else (int(lsn), int(seq or 0)))
                for name, key, lsn, seq in con.execute(
                    "SELECT table_name, key_columns, truncated_lsn, truncated_seq "
                    f"FROM {META}.mirror_tables"
                ).fetchall()
            }
            columns: dict[str, list[tuple[str, str]]] = {}
            for table, column, duck_type in con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() "
                "WHERE database_name = $1 AND schema_name = $2 ORDER BY column_index",
                [self._config.alias, MIRROR],
            ).fetchall():
                if column not in META_COLUMNS:
                    columns.setdefault(table, []).append((column, duck_type))
            # The flag lists are kept where the lake has their table (migration 0008).
            self._keeps_lists = LISTS in columns
            self._tables = {
                name: MirrorTable(name, tuple(columns[name]), key, truncated)
                for name, (key, truncated) in registered.items()
                if name in columns
            }
        return self._tables

    def unloaded_tables(self) -> list[str]:
        """Mirrored tables whose pre-existing rows no snapshot has loaded yet (tables the
        stream created after the initial snapshot)."""
        rows = self._reader.fetch(
            f"SELECT table_name FROM {META}.mirror_tables WHERE loaded_lsn IS NULL "
            "ORDER BY table_name"
        )
        return [str(r[0]) for r in rows]

    def mirrored_tables(self) -> dict[str, tuple[str, ...]]:
        with self._writer_use("reading the mirrored tables") as con:
            tables = self._mirror_tables(con)
            return {name: table.key for name, table in tables.items()}

    def describe_tables(self) -> dict[str, MirrorTable]:
        with self._writer_use("reading the mirrored tables") as con:
            return dict(self._mirror_tables(con))

    def ensure_table(self, spec: TableSpec) -> bool:
        with self._lock:
            with self._writer_use("reading the mirrored tables") as con:
                known = self._mirror_tables(con).get(spec.name)
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
            f"INSERT INTO {META}.mirror_tables (table_name, key_columns) VALUES ($1, $2)",
            [spec.name, list(spec.key)],
        )

    def apply(self, batch: ChangeBatch) -> int:
        with self._lock:
            with self._transaction("applying a CDC batch") as con:
                tables = self._mirror_tables(con)
                truncated = False
                listed: dict[str, pa.Table] = {}  # staged rows the flag lists follow
                for rows in batch.tables:
                    table = known_table(tables, rows.table)
                    staged = rows.to_arrow(table.column_names)
                    apply_rows(con, self._target(rows.table), table, staged, rows.truncated_at)
                    if rows.truncated_at is not None:
                        self._record_truncate(con, rows.table, rows.truncated_at)
                        truncated = True
                    if rows.table in (FLAGS, EPISODES):
                        listed[rows.table] = staged
                        if rows.truncated_at is not None:
                            listed["rebuild"] = staged
                if self._keeps_lists and listed:
                    if "rebuild" in listed:
                        self._lists.rebuild(con)
                    else:
                        self._lists.after_batch(con, listed.get(FLAGS), listed.get(EPISODES))
                changes = sum(rows.changes for rows in batch.tables)
                self._write_position(con, batch.position, f"cdc batch: {changes} changes")
            if truncated:
                self._tables = None
            return self._last_snapshot()

    @staticmethod
    def _record_truncate(
        con: duckdb.DuckDBPyConnection, table: str, version: tuple[int, int]
    ) -> None:
        con.execute(
            f"UPDATE {META}.mirror_tables SET truncated_lsn = $1, truncated_seq = $2 "
            "WHERE table_name = $3 AND (truncated_lsn IS NULL OR truncated_lsn < $1 "
            "OR (truncated_lsn = $1 AND truncated_seq < $2))",
            [version[0], version[1], table],
        )

    def _target(self, table: str) -> str:
        return table_ref(self._config.alias, MIRROR, table)

    def apply_snapshot(
        self,
        tables: Sequence[str],
        chunks: Iterable[SnapshotChunk],
        position: Position,
        *,
        version_lsn: int | None = None,
    ) -> int:
        """Load snapshot rows of ``tables`` in one commit, versioned ``(version_lsn, 0)``
        (default: ``position.snapshot_lsn``); tombstone the older rows the snapshot lacks;
        record ``position`` and that the tables are loaded."""
        lsn = position.snapshot_lsn if version_lsn is None else version_lsn
        with self._lock:
            with self._transaction("loading a snapshot") as con:
                known = self._mirror_tables(con)
                empty = {name for name in tables if self._is_empty(con, name)}
                for chunk in chunks:
                    table = known_table(known, chunk.table)
                    staged = snapshot_rows(chunk.rows, lsn)
                    if chunk.table in empty:  # nothing stored: no versions to compare
                        insert_rows(con, self._target(chunk.table), table, staged)
                    else:
                        apply_rows(con, self._target(chunk.table), table, staged)
                for name in tables:
                    con.execute(stale_rows_statement(self._target(name)), [lsn])
                if self._keeps_lists and (FLAGS in tables or EPISODES in tables):
                    self._lists.rebuild(con)
                con.execute(
                    f"UPDATE {META}.mirror_tables SET loaded_lsn = $1 "
                    "WHERE list_contains($2, table_name)",
                    [lsn, list(tables)],
                )
                self._write_position(con, position, f"snapshot of {len(tables)} tables at {lsn}")
            return self._last_snapshot()

    def _is_empty(self, con: duckdb.DuckDBPyConnection, name: str) -> bool:
        return con.execute(f"SELECT 1 FROM {self._target(name)} LIMIT 1").fetchone() is None

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
        with self._writer_use("reading the last snapshot") as con:
            row = con.execute(
                f"SELECT id FROM {ident(self._config.alias)}.last_committed_snapshot()"
            ).fetchone()
        if row is None or row[0] is None:
            raise WarehouseError("DuckLake reported no committed snapshot after a commit")
        return int(row[0])

    # -- lineage (its own writer, see warehouse.ducklake.lineage) ----------------------------

    def append_lineage(self, manifest_id: str, episodes: pa.Table) -> None:
        self._lineage.append(manifest_id, episodes)

    def drop_lineage(self, manifest_id: str) -> None:
        self._lineage.drop(manifest_id)

    def lineage_manifests(self) -> set[str]:
        return self._lineage.manifests()

    def maintain(self, *, protect: Collection[int] = ()) -> MaintenanceReport:
        """Purge old tombstones, flush inlined rows, merge small files, rewrite mostly-deleted
        files, expire snapshots older than ``config.snapshot_retain_s`` that no manifest
        references; see :mod:`warehouse.ducklake.maintenance`. Each mirrored table's current data
        version is kept too: data versions skip expired snapshots, which is right only while
        every expired change of a table is older than its version."""
        protect = {*protect, *self._versions.table_versions(self.current_snapshot())}
        with self._writer_use("warehouse maintenance") as con:
            return maintain_lake(
                con,
                self._config.alias,
                list(self._mirror_tables(con)),
                retain_s=self._config.snapshot_retain_s,
                rewrite_threshold=self._config.rewrite_delete_threshold,
                protect=protect,
            )

    def flush_inlined(self) -> float:
        started = time.monotonic()
        with self._writer_use("flushing inlined data") as con:
            con.execute(f"CALL ducklake_flush_inlined_data({literal(self._config.alias)})")
        return time.monotonic() - started

    # -- reader --------------------------------------------------------------------------

    def position(self, *, at: int | None = None) -> Position | None:
        pin = "" if at is None else f" AT (VERSION => {int(at)})"
        rows = self._reader.fetch(f"SELECT position FROM {META}.cdc_position{pin}")
        return Position.from_json(str(rows[0][0])) if rows else None

    def data_version(self, views: Collection[str], *, at: int | None = None) -> int:
        """The last snapshot at or before ``at`` (default: the current one) that changed the
        data behind ``views``; see :mod:`warehouse.ducklake.versions`. Reads only the snapshots
        committed since the last call (and the views' tables when the schema changed)."""
        at = self.current_snapshot() if at is None else at
        return self._versions.data_version(views, at)

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
        tables: Mapping[str, pa.Table] | None = None,
        tag: str | None = None,
    ) -> pa.Table:
        """Run one read-only query on the lake's latest (or the given) snapshot.

        The reader is a separate DuckDB, attached read-only (through ``reader_catalog_dsn``
        when set) with external access off, files limited to the data path and a locked
        configuration. ``timeout_s`` (default ``config.query_timeout_s``) interrupts the query;
        more than ``max_rows`` rows (default ``config.max_rows``) raise ``RowLimitError``;
        ``tables`` are registered on the query's cursor (see :meth:`LakeReader.query_arrow`);
        ``tag`` names the query for :meth:`cancel`.
        """
        return self._reader.query_arrow(
            sql,
            snapshot_id=snapshot_id,
            timeout_s=timeout_s,
            max_rows=max_rows,
            tables=tables,
            tag=tag,
        )

    def cancel(self, tag: str) -> None:
        """Interrupt the running read queries tagged ``tag``; see :meth:`LakeReader.cancel`."""
        self._reader.cancel(tag)

    def close(self) -> None:
        with self._lock:
            self._drop_writer()
        self._lineage.close()
        self._reader.close()
