"""The lineage writer of the lake: a DuckDB instance of its own, attached through
``lineage_catalog_dsn`` (a login that may write the catalog's rows, never a superuser), that
appends each manifest's lineage as one Parquet file of ``lineage.manifest_episodes`` in one
DuckLake commit. Readers see the rows through the views (see ``sql/warehouse/ducklake``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import duckdb
import pyarrow as pa

from warehouse.base import LINEAGE_COLUMNS, lineage_in_episode_order
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.connection import (
    attach_lake,
    discard_connection,
    is_transient,
    new_database,
)
from warehouse.ducklake.statements import ident
from warehouse.errors import WarehouseError, WarehouseUnavailableError

SCHEMA = "lineage"
TABLE = "manifest_episodes"
_STAGED = "_quarry_lineage"
T = TypeVar("T")


class LakeLineage:
    """Appends and drops manifests' lineage; connects at first use (thread-safe)."""

    def __init__(self, config: DuckLakeConfig) -> None:
        self._config = config
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()

    @property
    def _table(self) -> str:
        return ".".join(ident(part) for part in (self._config.alias, SCHEMA, TABLE))

    def append(self, manifest_id: str, episodes: pa.Table) -> None:
        """Replace the rows under ``manifest_id`` with ``episodes`` (sorted by episode id,
        so that a lookup of one manifest's page reads one file's row groups)."""
        rows = lineage_in_episode_order(episodes)
        manifest = pa.repeat(pa.scalar(manifest_id, pa.string()), rows.num_rows)
        staged = rows.add_column(0, "manifest_id", manifest)

        def write(con: duckdb.DuckDBPyConnection) -> None:
            con.execute(f"DELETE FROM {self._table} WHERE manifest_id = $1", [manifest_id])
            con.register(_STAGED, staged)
            try:
                columns = ", ".join(ident(c) for c in LINEAGE_COLUMNS)
                con.execute(
                    f"INSERT INTO {self._table} ({columns}) SELECT {columns} FROM {_STAGED}"
                )
            finally:
                con.unregister(_STAGED)

        self._in_transaction(f"writing the lineage of manifest {manifest_id}", write)

    def drop(self, manifest_id: str) -> None:
        self._in_transaction(
            f"dropping the lineage of manifest {manifest_id}",
            lambda con: con.execute(
                f"DELETE FROM {self._table} WHERE manifest_id = $1", [manifest_id]
            ),
        )

    def manifests(self) -> set[str]:
        rows = self._in_transaction(
            "listing the manifests with lineage",
            lambda con: con.execute(f"SELECT DISTINCT manifest_id FROM {self._table}").fetchall(),
        )
        return {str(row[0]) for row in rows}

    def _in_transaction(self, what: str, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        with self._connection(what) as con:
            con.execute("BEGIN TRANSACTION")
            result = work(con)
            con.execute("COMMIT")
            return result

    @contextmanager
    def _connection(self, what: str) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            try:
                if self._con is None:
                    self._con = self._open()
                yield self._con
            except duckdb.Error as error:
                self.close_locked(error)
                retryable = is_transient(error)
                kind = WarehouseUnavailableError if retryable else WarehouseError
                raise kind(f"{what} failed: {error}", retryable=retryable) from error
            except BaseException:
                self.close_locked()
                raise

    def _open(self) -> duckdb.DuckDBPyConnection:
        if self._config.data_url is None:
            self._config.lake_data_path.mkdir(parents=True, exist_ok=True)
        con = new_database(self._config.writer_threads, s3=self._config.data_url is not None)
        try:
            attach_lake(con, self._config, read_only=False, lineage=True)
        except BaseException:
            con.close()
            raise
        return con

    def close_locked(self, error: BaseException | None = None) -> None:
        """Forget the connection (the caller holds the lock, or nothing else uses this):
        rolled back and closed, or kept open when ``error`` says the catalog server went away
        (:func:`warehouse.ducklake.connection.discard_connection`)."""
        if self._con is not None:
            discard_connection(self._con, error)
            self._con = None

    def close(self) -> None:
        with self._lock:
            self.close_locked()
