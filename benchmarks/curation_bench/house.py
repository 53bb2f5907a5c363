"""The ClickHouse side of ``curation.py --backend clickhouse``: a chDB warehouse in this
process holding the very rows the DuckLake mirror holds, and the same curation built on it.

The embedded stack cannot run on chDB (its follower and service are two processes; chDB
opens a data folder in one), so rows are copied from the DuckLake mirror tables (each
table's columns plus ``_lsn``, ``_seq``, ``_deleted``, as CDC wrote them or the bulk insert
did) into the ClickHouse mirror, one warehouse commit per copy: like the bulk rows, a
benchmark of the curation path, not of CDC. The curation runs through the service's own
``run_curation`` here (no HTTP in front; registration goes to the stack's Postgres).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from pinned import SPEC
from pydantic import SecretStr
from timing import profile_curation

from warehouse.backends import open_warehouse
from warehouse.base import Warehouse
from warehouse.clickhouse.client import connect
from warehouse.clickhouse.meta import last_commit, last_position, record_changes, write_commit
from warehouse.clickhouse.schema import Databases
from warehouse.config import ClickHouseConfig, DuckLakeConfig
from warehouse.ducklake.connection import attach_lake, new_database

#: What a curation reads; the lineage tables are not copied.
CURATED = ("robots", "tasks", "episodes", "episode_quality_flags", "episode_labels")
CURATED += ("episode_stats",)
#: Rows per insert into chDB (Arrow batches of the DuckLake scan).
COPY_ROWS = 500_000


class House:
    """The chDB warehouse of one benchmark run."""

    def __init__(self, folder: Path, lake: DuckLakeConfig, memory_limit: str) -> None:
        self.config = ClickHouseConfig(
            dsn=SecretStr(f"chdb://{folder / 'chdb'}"),
            database="quarry_bench",
            reader_memory_limit=memory_limit,
        )
        self.names = Databases.of(self.config.database)
        self._lake = lake
        self._client = connect(self.config.server_dsn)  # keeps the engine up
        self.warehouse: Warehouse = open_warehouse(self.config)
        self.warehouse.bootstrap()

    def copy(self, position: str | None, where: dict[str, str] | None = None) -> int:
        """Copy the DuckLake mirror rows of each curated table (``where``: a filter per table,
        e.g. the bulk rows of one size) in one commit at the CDC ``position`` the lake has
        reached (JSON); returns the rows copied."""
        con = new_database(threads=2)
        copied, changed = 0, []
        try:
            attach_lake(con, self._lake, read_only=True)
            snapshot = last_commit(self._client, self.names) + 1
            for table in CURATED:
                if where is not None and table not in where:
                    continue
                condition = (where or {}).get(table, "true")
                reader = con.execute(f"SELECT * FROM mirror.{table} WHERE {condition}")
                rows = _insert(self._client, self.names, table, reader, snapshot)
                copied += rows
                if rows:
                    changed.append(table)
            record_changes(self._client, self.names, snapshot, changed)
            position = position or last_position(self._client, self.names)
            write_commit(
                self._client, self.names, snapshot, position, author="bench", message="copy"
            )
        finally:
            con.close()
        return copied

    def settle(self, timeout_s: float = 900.0) -> float:
        """Wait until no merge of the copied parts is running (at most ``timeout_s``);
        returns the seconds waited. A bulk copy leaves minutes of background merges, which
        would otherwise run through the timed builds of both backends (this process holds
        the chDB engine, beside the stack's service)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            busy = self._client.query(
                "SELECT (SELECT count() FROM system.merges)"
                " + (SELECT count() FROM system.mutations WHERE NOT is_done)"
            ).result_rows[0][0]
            if not busy:
                break
            time.sleep(0.5)
        return time.monotonic() - started

    def close(self) -> None:
        self.warehouse.close()
        self._client.close()


def _insert(client: Any, names: Databases, table: str, reader: Any, snapshot: int) -> int:
    total = 0
    for batch in reader.fetch_record_batch(COPY_ROWS):
        rows = pa.Table.from_batches([batch])
        rows = rows.append_column("_commit", pa.array([snapshot] * rows.num_rows, pa.uint64()))
        client.insert_arrow(table, _plain(rows), database=names.mirror)
        total += rows.num_rows
    return total


def _plain(rows: pa.Table) -> pa.Table:
    """UUIDs and JSON as text (ClickHouse parses them into its column types)."""
    fields = []
    for field in rows.schema:
        kind = field.type
        if isinstance(kind, pa.BaseExtensionType):
            kind = pa.string()
        fields.append(pa.field(field.name, kind))
    return rows.cast(pa.schema(fields)) if fields != list(rows.schema) else rows


def time_house(
    house: House, conn: psycopg.Connection[Any], out: Path, first_stride: int, repeats: int
) -> dict[str, Any]:
    """``repeats`` builds of the curation on ClickHouse, in this process, each with a new
    anchor stride (a cold build each): the median total and each build's breakdown."""
    runs = [
        profile_curation(house.warehouse, conn, out, first_stride + n, 120.0)
        for n in range(repeats)
    ]
    totals = [run["total"] for run in runs]
    return {
        "seconds": statistics.median(totals),
        "runs_s": totals,
        "breakdown_s": runs[0],
        "anchor_strides": [first_stride + n for n in range(repeats)],
        "spec_stride": SPEC.anchor_stride,
    }


def bulk_range(start: int, stop: int) -> dict[str, str]:
    """The filters that pick bulk rows ``[start, stop)`` of each table they are in (their ids
    are ``b0000000-0000-4000-8000-<row number>``, so a text range)."""
    low, high = (f"'b0000000-0000-4000-8000-{i:012x}'" for i in (start, stop))
    column = {"episodes": "id", "episode_quality_flags": "episode_id"}
    return {
        t: f"CAST({c} AS VARCHAR) >= {low} AND CAST({c} AS VARCHAR) < {high}"
        for t, c in column.items()
    }
