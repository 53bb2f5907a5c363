"""Read-only queries for the service and notebooks: a separate DuckDB with the lake attached
read-only (through ``reader_catalog_dsn`` when set), locked down, with a time limit and a row cap.

DuckDB has no statement timeout: a timer thread interrupts the query's cursor instead.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import duckdb
import pyarrow as pa

from warehouse.base import check_tag
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.connection import attach_lake, is_transient, lock_down, new_database
from warehouse.ducklake.pinning import prepare_query
from warehouse.ducklake.statements import ident
from warehouse.errors import QueryError, QueryTimeoutError, RowLimitError, WarehouseUnavailableError

log = logging.getLogger(__name__)

_BATCH_ROWS = 65_536
#: Names a caller's Arrow table may take (see :meth:`LakeReader.query_arrow`).
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class LakeReader:
    """A pool-free reader: one DuckDB instance, one cursor per query (thread-safe)."""

    def __init__(self, config: DuckLakeConfig) -> None:
        self._config = config
        self._db: duckdb.DuckDBPyConnection | None = None
        self._names: frozenset[str] | None = None
        self._lock = threading.Lock()
        self._running: dict[str, set[duckdb.DuckDBPyConnection]] = {}  # tag -> its cursors

    def _database(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self._db is None:
                db = new_database(
                    self._config.reader_threads,
                    self._config.reader_memory_limit,
                    s3=self._config.data_url is not None,
                )
                try:
                    attach_lake(db, self._config, read_only=True)
                    lock_down(db, self._config)
                except duckdb.Error as error:
                    db.close()
                    raise WarehouseUnavailableError(
                        f"cannot open the warehouse reader: {error}",
                        retryable=is_transient(error),
                    ) from error
                except BaseException:
                    db.close()
                    raise
                self._db = db
            return self._db

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor on the reader with the lake as its default catalog."""
        cur = self._database().cursor()
        try:
            cur.execute(f"USE {ident(self._config.alias)}")
        except duckdb.Error as error:
            cur.close()
            self._reset_if_broken(error)
            raise WarehouseUnavailableError(
                f"cannot read the warehouse: {error}", retryable=is_transient(error)
            ) from error
        return cur

    def fetch(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of a small internal query (catalog functions, the position table)."""
        try:
            with self.cursor() as cur:
                return cur.execute(sql, params).fetchall()
        except duckdb.Error as error:
            # Reset only once the cursor has closed: closing the database under an open
            # cursor whose catalog connection broke can abort the process inside DuckDB.
            self._reset_if_broken(error)
            raise WarehouseUnavailableError(f"warehouse read failed: {error}") from error

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
        """Run one read-only query and return its result as an Arrow table.

        Only a single query statement runs (anything else is a :class:`QueryError`).

        :param snapshot_id: read this DuckLake snapshot instead of the latest one.
        :param timeout_s: seconds before the query is interrupted (default: the config's).
        :param max_rows: raise :class:`RowLimitError` past this many rows (default: the
            config's ``max_rows``; ``None`` there means no cap).
        :param tables: Arrow tables the query can read by name, for this query only; they
            are not pinned to ``snapshot_id``. A name is a lower-case identifier that names
            no table or view of the lake's ``main`` schema (anything else is a
            :class:`QueryError`).
        :param tag: names the query for :meth:`cancel` (see :func:`warehouse.base.check_tag`).
        """
        if tag is not None:
            check_tag(tag)
        tables = tables or {}
        self._check_tables(tables, sql)
        text = prepare_query(sql, snapshot_id, unpinned=frozenset(tables))
        limit_s = timeout_s if timeout_s is not None else self._config.query_timeout_s
        cap = max_rows if max_rows is not None else self._config.max_rows
        try:
            return self._run(text, sql, snapshot_id, tables, limit_s, cap, tag)
        except QueryError as error:
            if not _stale_catalog(error.__cause__):
                raise
            # The catalog changed under this reader's cache (see _stale_catalog): start a
            # fresh reader and run the query once more.
            log.info("warehouse reader: stale catalog (%s); reattaching", error.__cause__)
            self._retire()
            return self._run(text, sql, snapshot_id, tables, limit_s, cap, tag)

    def _run(
        self,
        text: str,
        sql: str,
        snapshot_id: int | None,
        tables: Mapping[str, pa.Table],
        limit_s: float,
        cap: int | None,
        tag: str | None,
    ) -> pa.Table:
        with self.cursor() as cur, self._tagged(tag, cur):
            for name, table in tables.items():
                cur.register(name, table)  # a view of this cursor's own: gone when it closes
            fired = threading.Event()

            def stop() -> None:
                fired.set()
                cur.interrupt()

            timer = threading.Timer(limit_s, stop)
            timer.start()
            try:
                return self._collect(cur, text, cap)
            except (duckdb.Error, pa.ArrowException, OSError) as error:
                if fired.is_set():
                    raise QueryTimeoutError(
                        f"query ran past {limit_s} s and was stopped", timeout_s=limit_s, sql=sql
                    ) from error
                raise QueryError(
                    f"query failed: {error}", sql=sql, snapshot_id=snapshot_id
                ) from error
            finally:
                timer.cancel()

    @contextmanager
    def _tagged(self, tag: str | None, cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """Keep ``cur`` findable by ``tag`` while its query runs."""
        if tag is None:
            yield
            return
        with self._lock:
            self._running.setdefault(tag, set()).add(cur)
        try:
            yield
        finally:
            with self._lock:
                cursors = self._running.get(tag, set())
                cursors.discard(cur)
                if not cursors:
                    self._running.pop(tag, None)

    def cancel(self, tag: str) -> None:
        """Interrupt the running queries tagged ``tag`` (DuckDB's ``interrupt``; a query that
        has not started yet is not affected)."""
        check_tag(tag)
        with self._lock:
            cursors = list(self._running.get(tag, ()))
        for cur in cursors:
            with contextlib.suppress(duckdb.Error):  # it finished and closed meanwhile
                cur.interrupt()

    def _check_tables(self, tables: Mapping[str, pa.Table], sql: str) -> None:
        """Refuse a caller's table whose name is not a plain lower-case identifier or would
        shadow one of the lake's tables or views (the query would read it instead)."""
        for name, table in tables.items():
            if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
                raise QueryError(
                    f"cannot pass a table named {name!r}: names are lower-case identifiers",
                    sql=sql,
                )
            if not isinstance(table, pa.Table):
                raise QueryError(
                    f"table {name!r} is a {type(table).__name__}, not a pyarrow.Table", sql=sql
                )
            if name in self.relation_names():
                raise QueryError(
                    f"cannot pass a table named {name!r}: the warehouse has a table or view "
                    "of that name, which the query would no longer read",
                    sql=sql,
                )

    def relation_names(self) -> frozenset[str]:
        """Names of the tables and views that unqualified names reach (the lake's ``main``
        schema: the curation views and internal views), lower case. Kept once read from a
        bootstrapped lake: only bootstrap creates relations there (CDC adds tables to
        ``mirror``)."""
        if self._names is not None:
            return self._names
        rows = self.fetch(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = $1 "
            "AND schema_name = 'main' UNION SELECT view_name FROM duckdb_views() "
            "WHERE database_name = $1 AND schema_name = 'main'",
            [self._config.alias],
        )
        names = frozenset(str(row[0]).lower() for row in rows)
        if names:
            self._names = names
        return names

    @staticmethod
    def _collect(cur: duckdb.DuckDBPyConnection, sql: str, cap: int | None) -> pa.Table:
        cur.execute(sql)
        batches: list[pa.RecordBatch] = []
        rows = 0
        # The stream is released here, before its cursor closes: a stream that outlives its
        # cursor (kept alive by a raised error's traceback) would be released later, on a
        # closed connection.
        with cur.to_arrow_reader(_BATCH_ROWS) as reader:
            for batch in reader:
                rows += batch.num_rows
                if cap is not None and rows > cap:
                    raise RowLimitError(
                        f"the query returned more than {cap} rows; add a LIMIT or a narrower "
                        "filter",
                        max_rows=cap,
                        sql=sql,
                    )
                batches.append(batch)
            return pa.Table.from_batches(batches, schema=reader.schema)

    def _reset_if_broken(self, error: duckdb.Error) -> None:
        if is_transient(error):
            self.close()

    def _retire(self) -> None:
        """Drop the reader's database without closing it: queries running on its cursors
        finish; the next query attaches afresh."""
        with self._lock:
            self._db = None
            self._names = None

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _stale_catalog(error: BaseException | None) -> bool:
    """Whether ``error`` says the reader's cached view of the DuckLake catalog is out of date
    rather than the query wrong. DuckLake 1.5.5 (Postgres catalog) keeps, in a long-lived
    reader, the inlined-data tables it has read; once a mirrored table has gained a column
    (manifests.tags, by a source migration) and the writer has flushed its inlined rows to
    Parquet, that reader fails: it reads the flushed inlined rows of a list column ("INTERNAL
    Error: Attempted to access index 0 within vector of size 0", which also invalidates its
    database), names the dropped inlined-data table ("relation ducklake_inlined_data_... does
    not exist"), and its catalog transaction then stays aborted ("current transaction is
    aborted") for every later query. A freshly attached reader reads the same snapshot
    correctly (tests/warehouse/test_warehouse_read.py)."""
    if not isinstance(error, duckdb.Error):
        return False
    text = str(error).lower()
    return (
        ("ducklake_inlined_data" in text and "does not exist" in text)
        or "current transaction is aborted" in text
        or (
            isinstance(error, duckdb.InternalException)
            and "attempted to access index" in text
            and "within vector of size" in text
        )
    )
