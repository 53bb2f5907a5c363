"""The lineage writer of ClickHouse: a client of its own, logged in as ``lineage_dsn`` (an
account that may insert into and delete from ``<database>_meta.lineage``; unset: ``dsn``),
that inserts each manifest's lineage in one block. Readers see the rows through the views
(see ``sql/warehouse/clickhouse``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.base import LINEAGE_COLUMNS, lineage_in_episode_order
from warehouse.clickhouse.client import connect, failure
from warehouse.clickhouse.schema import Databases
from warehouse.config import ClickHouseConfig

TABLE = "lineage"


class ClickHouseLineage:
    """Appends and drops manifests' lineage; connects at first use (thread-safe)."""

    def __init__(self, config: ClickHouseConfig, names: Databases) -> None:
        self._config = config
        self._names = names
        self._client: Client | None = None
        self._lock = threading.Lock()

    @property
    def _table(self) -> str:
        return self._names.ident(self._names.meta, TABLE)

    def append(self, manifest_id: str, episodes: pa.Table) -> None:
        """Replace the rows under ``manifest_id`` with ``episodes``: one insert, one block
        (a block is inserted whole or not at all)."""
        rows = lineage_in_episode_order(episodes)
        # The manifest id as a dictionary of one value: the block that crosses to the server
        # holds 4 bytes a row for it instead of 64 (28 MB of 72 at 439k rows).
        manifest = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(rows.num_rows, dtype=np.int32)), pa.array([manifest_id])
        )
        staged = rows.add_column(0, "manifest_id", manifest)
        with self._connection(f"writing the lineage of manifest {manifest_id}") as client:
            self._delete(client, manifest_id)
            client.insert_arrow(
                TABLE,
                staged.select(list(LINEAGE_COLUMNS)),
                database=self._names.meta,
                settings={"max_insert_block_size": max(staged.num_rows, 1)},
            )

    def drop(self, manifest_id: str) -> None:
        with self._connection(f"dropping the lineage of manifest {manifest_id}") as client:
            self._delete(client, manifest_id)

    def manifests(self) -> set[str]:
        with self._connection("listing the manifests with lineage") as client:
            rows = client.query(f"SELECT DISTINCT manifest_id FROM {self._table}").result_rows
        return {str(row[0]) for row in rows}

    def _delete(self, client: Client, manifest_id: str) -> None:
        client.command(
            f"DELETE FROM {self._table} WHERE manifest_id = {{id:String}}",
            parameters={"id": manifest_id},
        )

    @contextmanager
    def _connection(self, what: str) -> Iterator[Client]:
        with self._lock:
            try:
                if self._client is None:
                    dsn = self._config.lineage_dsn or self._config.dsn
                    assert dsn is not None  # check_complete
                    self._client = connect(dsn.get_secret_value())
                yield self._client
            except ClickHouseError as error:
                self._close_locked()
                raise failure(what, error, database=self._names.meta) from error

    def _close_locked(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
