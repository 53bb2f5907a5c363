"""The ClickHouse backend: the scale-out warehouse, through clickhouse-connect.

ClickHouse has neither multi-statement transactions nor snapshots, so this backend makes
both from plain MergeTree tables (see docs/warehouse.md, "ClickHouse"):

- a *snapshot* is a commit number. Each write (a CDC batch, a snapshot load, a schema change)
  takes the next one, tags every row version it inserts with it (``_commit``) and ends by
  writing its row in ``<db>_meta.commits`` with the CDC position it reaches;
- the mirrored tables keep every version of a row. A read at snapshot S sees, per key, the
  newest ``(_lsn, _seq)`` among versions with ``_commit <= S``: the curation views are
  parameterized views that the reader pins (``episodes(snapshot = S)``), each the versions
  minus those its table's superseded list hides by S (:mod:`warehouse.clickhouse.superseded`,
  written in the commit that supersedes them). A write is atomic for
  readers (its rows are invisible until its commit row exists), and a rebuild at S reads what
  the first build read, until maintenance expires S;
- a version is inserted only when it is newer than the stored newest of its key (the LSN
  guard), so replays and at-least-once delivery converge, and a failed write's rows are
  deleted before the next write (:func:`warehouse.clickhouse.meta.repair`): exactly once.

One writer at a time (the CDC follower, or the Debezium endpoint), as with DuckLake.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.base import MaintenanceReport, MirrorTable, Warehouse, known_table
from warehouse.changes import ChangeBatch, Position, SnapshotChunk, TableSpec
from warehouse.clickhouse.apply import (
    guarded_insert,
    plain_insert,
    stage_batch,
    staged,
    tombstone_statement,
)
from warehouse.clickhouse.client import connect, failure
from warehouse.clickhouse.lineage import ClickHouseLineage
from warehouse.clickhouse.maintenance import maintain_clickhouse
from warehouse.clickhouse.meta import (
    SCHEMA_CHANGE,
    last_commit,
    last_position,
    read_tables,
    record_changes,
    repair,
    update_tables,
    write_commit,
)
from warehouse.clickhouse.reader import ClickHouseReader
from warehouse.clickhouse.schema import (
    DIALECT,
    SQL_DIR,
    Databases,
    apply_sql_files,
    column_definition,
    create_table_statement,
    view_tables,
)
from warehouse.clickhouse.superseded import list_name, listed_tables, record_statement
from warehouse.config import ClickHouseConfig
from warehouse.errors import QueryError
from warehouse.rows import KEEP, snapshot_rows
from warehouse.types import duckdb_type

CDC_AUTHOR = "quarry-cdc"
SCHEMA_AUTHOR = "quarry"
_Staged = tuple[str, pa.Table, tuple[int, int] | None]


class ClickHouseWarehouse(Warehouse):
    """ClickHouse warehouse. Constructing one connects to nothing; a process that only reads
    (the service) never opens the writer."""

    #: The SQL dialect :meth:`query_arrow` takes (sqlglot's name).
    dialect = DIALECT

    def __init__(self, config: ClickHouseConfig, *, sql_dir: Path | None = None) -> None:
        config.check_complete()
        self._config = config
        self._names = Databases.of(config.database)
        self._sql_dir = sql_dir or SQL_DIR
        self._reader = ClickHouseReader(config)
        self._writer: Client | None = None
        self._lineage = ClickHouseLineage(config, self._names)
        self._repaired = False
        self._tables: dict[str, MirrorTable] | None = None
        self._listed: frozenset[str] | None = None
        self._views: tuple[int, dict[str, frozenset[str]]] | None = None
        self._lock = threading.RLock()

    @property
    def config(self) -> ClickHouseConfig:
        return self._config

    @property
    def databases(self) -> Databases:
        return self._names

    # -- writer --------------------------------------------------------------------------

    @contextmanager
    def _writing(self, what: str) -> Iterator[Client]:
        """The writer client, repaired after any earlier failed write; a failure here drops
        the client and leaves the repair to the next write."""
        with self._lock:
            try:
                if self._writer is None:
                    self._writer = connect(self._config.server_dsn)
                if not self._repaired:
                    repair(self._writer, self._names)
                    self._repaired = True
                yield self._writer
            except ClickHouseError as error:
                self._drop_writer()
                raise failure(what, error, database=self._names.views) from error
            except BaseException:
                self._drop_writer()
                raise

    def _drop_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._repaired = False
        self._tables = None
        self._listed = None

    def _commit(
        self, client: Client, snapshot: int, position: str | None, author: str, message: str
    ) -> None:
        write_commit(client, self._names, snapshot, position, author=author, message=message)

    def bootstrap(self) -> None:
        with self._writing("bootstrap") as client:
            applied = apply_sql_files(client, self._names, self._sql_dir)
            if applied:
                snapshot = last_commit(client, self._names) + 1
                record_changes(client, self._names, snapshot, [SCHEMA_CHANGE])
                position = last_position(client, self._names)
                message = f"bootstrap: {', '.join(applied)}"
                self._commit(client, snapshot, position, SCHEMA_AUTHOR, message)
        self._tables = None
        self._listed = None
        self._views = None

    def _mirror_tables(self, client: Client) -> dict[str, MirrorTable]:
        if self._tables is None:
            self._tables = read_tables(client, self._names)
        return self._tables

    def mirrored_tables(self) -> dict[str, tuple[str, ...]]:
        with self._writing("reading the mirrored tables") as client:
            return {name: t.key for name, t in self._mirror_tables(client).items()}

    def describe_tables(self) -> dict[str, MirrorTable]:
        with self._writing("reading the mirrored tables") as client:
            return dict(self._mirror_tables(client))

    def unloaded_tables(self) -> list[str]:
        rows = self._reader.fetch(
            "SELECT table_name FROM (SELECT table_name, loaded_lsn FROM "
            f"{self._names.ident(self._names.meta, 'mirror_tables')} "
            f"WHERE _commit <= (SELECT max(snapshot) FROM {self._commits}) "
            "ORDER BY _commit DESC, _written DESC LIMIT 1 BY table_name) "
            "WHERE loaded_lsn IS NULL ORDER BY table_name"
        )
        return [str(r[0]) for r in rows]

    def ensure_table(self, spec: TableSpec) -> bool:
        with self._writing(f"schema change of {spec.name}") as client:
            known = self._mirror_tables(client).get(spec.name)
            have = {name for name, _ in known.columns} if known is not None else set()
            missing = [c for c in spec.columns if c.name not in have]
            if known is not None and not missing:
                return False
            snapshot = last_commit(client, self._names) + 1
            target = self._target(spec.name)
            if known is None:
                self._create_table(client, target, spec, snapshot)
            for column in missing if known is not None else ():
                definition = column_definition(column.name, duckdb_type(column.pg_type))
                client.command(f"ALTER TABLE {target} ADD COLUMN IF NOT EXISTS {definition}")
            record_changes(client, self._names, snapshot, [SCHEMA_CHANGE])
            position = last_position(client, self._names)
            self._commit(client, snapshot, position, SCHEMA_AUTHOR, f"schema of {spec.name}")
            self._tables = None
            return True

    def _create_table(self, client: Client, target: str, spec: TableSpec, snapshot: int) -> None:
        client.command(create_table_statement(target, spec))
        update_tables(client, self._names, snapshot, [spec.name], key_columns=list(spec.key))

    def _target(self, table: str) -> str:
        return self._names.ident(self._names.mirror, table)

    def apply(self, batch: ChangeBatch) -> int:
        with self._writing("applying a CDC batch") as client:
            tables = self._mirror_tables(client)
            snapshot = last_commit(client, self._names) + 1
            truncated = False
            changed: set[str] = set()
            for name, rows, truncated_at in stage_batch(tables, batch):
                table = known_table(tables, name)
                self._apply_rows(client, table, rows, truncated_at, snapshot)
                if truncated_at is not None:
                    self._record_truncate(client, table, truncated_at, snapshot)
                    truncated = True
                if self._wrote(client, name, snapshot):
                    changed.add(name)
                    self._record_superseded(client, table, snapshot)
            record_changes(client, self._names, snapshot, changed)
            changes = sum(rows.changes for rows in batch.tables)
            message = f"cdc batch: {changes} changes"
            self._commit(client, snapshot, batch.position.to_json(), CDC_AUTHOR, message)
            if truncated:
                self._tables = None
            return snapshot

    def _apply_rows(
        self,
        client: Client,
        table: MirrorTable,
        rows: pa.Table,
        truncated_at: tuple[int, int] | None,
        snapshot: int,
    ) -> None:
        target = self._target(table.name)
        if truncated_at is not None:
            lsn, seq = truncated_at
            parameters = {"lsn": lsn, "seq": seq, "commit": snapshot}
            client.command(tombstone_statement(target, table.key), parameters)
        if rows.num_rows == 0:
            return
        with staged(client, self._names, rows) as stage:
            sql, parameters = guarded_insert(target, stage, table, rows, table.truncated_at)
            client.command(sql, {**parameters, "commit": snapshot})

    def _record_truncate(
        self, client: Client, table: MirrorTable, version: tuple[int, int], snapshot: int
    ) -> None:
        if table.truncated_at is None or version > table.truncated_at:
            update_tables(
                client,
                self._names,
                snapshot,
                [table.name],
                truncated_lsn=version[0],
                truncated_seq=version[1],
            )

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
        with self._writing("loading a snapshot") as client:
            known = self._mirror_tables(client)
            for name in tables:
                known_table(known, name)
            snapshot = last_commit(client, self._names) + 1
            empty = {name for name in tables if self._is_empty(client, name)}
            written: set[str] = set()
            for chunk in chunks:
                table = known_table(known, chunk.table)
                written.add(chunk.table)
                rows = snapshot_rows(chunk.rows, lsn).drop_columns([KEEP])
                with staged(client, self._names, rows) as stage:
                    target = self._target(chunk.table)
                    parameters: dict[str, Any] = {}
                    if chunk.table in empty:
                        sql = plain_insert(target, stage, table, rows)
                    else:
                        sql, parameters = guarded_insert(
                            target, stage, table, rows, table.truncated_at
                        )
                    client.command(sql, {**parameters, "commit": snapshot})
            for name in tables:
                parameters = {"lsn": lsn, "seq": 0, "commit": snapshot}
                client.command(tombstone_statement(self._target(name), known[name].key), parameters)
            update_tables(client, self._names, snapshot, tables, loaded_lsn=lsn)
            loaded = {name for name in {*tables, *written} if self._wrote(client, name, snapshot)}
            # A table that was empty holds one version per key now: nothing to list.
            for name in sorted(loaded - empty):
                self._record_superseded(client, known[name], snapshot)
            record_changes(client, self._names, snapshot, loaded)
            message = f"snapshot of {len(tables)} tables at {lsn}"
            self._commit(client, snapshot, position.to_json(), CDC_AUTHOR, message)
            return snapshot

    def _record_superseded(self, client: Client, table: MirrorTable, snapshot: int) -> None:
        """List the versions of ``table`` that commit ``snapshot`` superseded (see
        :mod:`warehouse.clickhouse.superseded`), if the table has a list."""
        if self._listed is None:
            self._listed = listed_tables(client, self._names)
        if table.name not in self._listed:
            return
        listing = self._names.ident(self._names.meta, list_name(table.name))
        statement = record_statement(self._target(table.name), listing, table.key)
        client.command(statement, {"commit": snapshot})

    def _is_empty(self, client: Client, name: str) -> bool:
        return not client.query(f"SELECT 1 FROM {self._target(name)} LIMIT 1").result_rows

    def _wrote(self, client: Client, name: str, snapshot: int) -> bool:
        """Whether commit ``snapshot`` wrote a version of table ``name`` (the LSN guard may
        have dropped every row: a replay changes no data, so it makes no data version). The
        ``_commit`` skip index limits this to the parts the commit wrote."""
        rows = client.query(
            f"SELECT 1 FROM {self._target(name)} WHERE _commit = {{c:UInt64}} LIMIT 1",
            parameters={"c": snapshot},
        ).result_rows
        return bool(rows)

    # -- lineage (its own client, see warehouse.clickhouse.lineage) -------------------------

    def append_lineage(self, manifest_id: str, episodes: pa.Table) -> None:
        self._lineage.append(manifest_id, episodes)

    def drop_lineage(self, manifest_id: str) -> None:
        self._lineage.drop(manifest_id)

    def lineage_manifests(self) -> set[str]:
        return self._lineage.manifests()

    def maintain(self, *, protect: Collection[int] = ()) -> MaintenanceReport:
        """Expire snapshots older than ``config.snapshot_retain_s`` that no manifest
        references and delete the row versions only they could read; see
        :mod:`warehouse.clickhouse.maintenance`."""
        with self._writing("warehouse maintenance") as client:
            return maintain_clickhouse(
                client,
                self._names,
                list(self._mirror_tables(client).values()),
                retain_s=self._config.snapshot_retain_s,
                protect=protect,
            )

    def flush_inlined(self) -> float:
        """Nothing to flush: ClickHouse writes every insert as a part of its own."""
        return 0.0

    # -- reader --------------------------------------------------------------------------

    def current_snapshot(self) -> int:
        """The latest commit number (0 before bootstrap)."""
        rows = self._reader.fetch(f"SELECT max(snapshot) FROM {self._commits}")
        return int(rows[0][0] or 0)

    @property
    def _commits(self) -> str:
        return self._names.ident(self._names.meta, "commits")

    def position(self, *, at: int | None = None) -> Position | None:
        rows = self._reader.fetch(
            f"SELECT position FROM {self._commits} WHERE position IS NOT NULL "
            "AND snapshot <= {at:UInt64} ORDER BY snapshot DESC LIMIT 1",
            {"at": at if at is not None else 2**64 - 1},
        )
        return Position.from_json(str(rows[0][0])) if rows else None

    def data_version(self, views: Collection[str], *, at: int | None = None) -> int:
        """The last commit at or before ``at`` (default: the current one) that changed the
        mirrored tables behind ``views`` (curation views, or mirrored tables by name); a
        schema change counts for every view. A commit whose rows the LSN guard all dropped
        changed nothing, and is no data version. One small query per call; each view's
        tables are read again when the schema changed."""
        at = self.current_snapshot() if at is None else at
        rows = self._reader.fetch(
            "SELECT table_name, maxIf(_commit, _commit <= {at:UInt64}), max(_commit) FROM "
            f"{self._names.ident(self._names.meta, 'table_changes')} GROUP BY table_name",
            {"at": at},
        )
        last = {str(name): int(before) for name, before, _ in rows}
        schema = next((int(top) for name, _, top in rows if name == SCHEMA_CHANGE), 0)
        per_view = self._view_tables(schema)
        names = {t for view in views for t in per_view.get(view, frozenset({view}))}
        found = max([last.get(SCHEMA_CHANGE, 0), *(last.get(name, 0) for name in names)])
        return found or at

    def _view_tables(self, schema: int) -> dict[str, frozenset[str]]:
        """Each view's mirrored tables, as of the latest schema change ``schema``."""
        cached = self._views
        if cached is None or cached[0] != schema:
            definitions = self._reader.fetch(
                "SELECT name, as_select FROM system.tables WHERE database = {db:String} "
                "AND engine = 'View'",
                {"db": self._names.views},
            )
            tables = view_tables({str(n): str(s) for n, s in definitions}, self._names)
            cached = self._views = (schema, tables)
        return cached[1]

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
        """Run one read-only query, in ClickHouse's dialect, at the latest (or the given)
        snapshot; see :mod:`warehouse.clickhouse.reader` for the limits. ``timeout_s``
        (default ``config.query_timeout_s``) stops the query in the engine
        (``QueryTimeoutError``); more than ``max_rows`` rows (default ``config.max_rows``)
        raise ``RowLimitError``; ``tables`` are Arrow tables the query reads by name (as
        temporary tables, unpinned); ``tag`` (letters, digits, ``-``, ``_``) names the query
        for :meth:`cancel`."""
        snapshot = self.current_snapshot() if snapshot_id is None else int(snapshot_id)
        if snapshot_id is not None and not self._exists(snapshot):
            raise QueryError(
                f"warehouse snapshot {snapshot} does not exist (never made, or expired by "
                "maintenance)",
                snapshot_id=snapshot,
            )
        return self._reader.query_arrow(
            sql, snapshot=snapshot, timeout_s=timeout_s, max_rows=max_rows, tables=tables, tag=tag
        )

    def cancel(self, tag: str) -> None:
        """Stop this warehouse's running read queries tagged ``tag`` (``KILL QUERY ...
        ASYNC``): each fails with a ``QueryError`` (code 394, ``QUERY_WAS_CANCELLED``). A query
        that starts afterwards is not affected; cancel again to stop it."""
        self._reader.kill(tag)

    def _exists(self, snapshot: int) -> bool:
        rows = self._reader.fetch(
            f"SELECT count() FROM {self._commits} WHERE snapshot = {{s:UInt64}}", {"s": snapshot}
        )
        return bool(rows[0][0])

    def close(self) -> None:
        with self._lock:
            self._drop_writer()
        self._lineage.close()
        self._reader.close()
