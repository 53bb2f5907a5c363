"""CDC test helpers: a per-test slot, a follower thread, source data, a row-for-row compare."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.config import CdcConfig
from cdc.follower import BatchReport, follow
from cdc.slot import drop_slot
from cdc.source import connect
from warehouse.changes import parse_lsn
from warehouse.ducklake.backend import DuckLakeWarehouse

MIRRORED = (
    "robots",
    "tasks",
    "episodes",
    "episode_quality_flags",
    "episode_labels",
    "episode_stats",
    "manifests",
)


@pytest.fixture
def cdc_config(pg_dsn: str) -> Iterator[CdcConfig]:
    """A config with a slot of this test's own; the slot is dropped afterwards."""
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    config = CdcConfig(slot=f"quarry_{dbname}", poll_interval_s=0.05, heartbeat_interval_s=1.0)
    yield config
    with connect(pg_dsn) as conn:
        drop_slot(conn, config.slot)


class FollowerThread:
    """The follower running in a thread; ``stop()`` re-raises what it died of."""

    def __init__(
        self, dsn: str, lake: DuckLakeWarehouse, config: CdcConfig, status_path: Path | None
    ) -> None:
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.reports: list[BatchReport] = []
        self._thread = threading.Thread(
            target=self._run, args=(dsn, lake, config, status_path), daemon=True
        )
        self._thread.start()

    def _run(
        self, dsn: str, lake: DuckLakeWarehouse, config: CdcConfig, status_path: Path | None
    ) -> None:
        try:
            follow(dsn, lake, config, self.stop_event, status_path, on_batch=self.reports.append)
        except BaseException as error:
            self.error = error

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self.stop_event.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "follower did not stop"
        if self.error is not None:
            raise self.error


@contextmanager
def running(
    dsn: str, lake: DuckLakeWarehouse, config: CdcConfig, status_path: Path | None = None
) -> Iterator[FollowerThread]:
    follower = FollowerThread(dsn, lake, config, status_path)
    try:
        yield follower
    finally:
        follower.stop()


def wait_until(
    predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition"
) -> float:
    """Seconds until ``predicate()`` held; fails the test after ``timeout_s``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - started


def current_lsn(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


def caught_up(
    conn: psycopg.Connection[Any], lake: DuckLakeWarehouse, follower: FollowerThread | None = None
) -> Callable[[], bool]:
    """A predicate: the warehouse's position has reached the source's WAL position now."""
    target = current_lsn(conn)

    def check() -> bool:
        if follower is not None and not follower.alive():
            follower.stop()
        position = lake.position()
        return position is not None and position.lsn >= target

    return check


def seed(conn: psycopg.Connection[Any], episodes: int, *, robot: str = "r1") -> list[str]:
    """A robot, a task and ``episodes`` episodes with flags, stats and a label."""
    conn.execute(
        "INSERT INTO robots (id, model, site) VALUES (%s, 'arm', 'lab') ON CONFLICT DO NOTHING",
        (robot,),
    )
    conn.execute("INSERT INTO tasks (id, description) VALUES ('t1', 'pick') ON CONFLICT DO NOTHING")
    return insert_episodes(conn, episodes, robot=robot)


def insert_episodes(conn: psycopg.Connection[Any], count: int, *, robot: str = "r1") -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO episodes (id, robot_id, task_id, site, operator, started_at, ended_at,"
            " start_ns, end_ns, steps, control_hz, success, uri, size_bytes, sha256, topics,"
            " schema_version, pipeline_version, robot_sw_version) VALUES (%s, %s, 't1', 'lab',"
            " 'ann', now(), now() + interval '1 minute', 0, 60000000000, 600, 10.0, true, %s,"
            " 1234, repeat('ab', 32), '[{\"topic\": \"/cam\", \"rate_hz\": 30}]', 1, 1, '1.0')",
            [(i, robot, f"objects/{i}.mcap") for i in ids],
        )
        cur.executemany(
            "INSERT INTO episode_quality_flags (episode_id, flag) VALUES (%s, 'ok')",
            [(i,) for i in ids],
        )
        cur.executemany(
            "INSERT INTO episode_stats (episode_id, field, dim, count, sum, sum_sq, min, max) "
            "VALUES (%s, 'state', 0, 10, 1.5, 2.25, -1.0, 1e300)",
            [(i,) for i in ids],
        )
        cur.executemany(
            "INSERT INTO episode_labels (episode_id, key, value, start_ns, end_ns) "
            "VALUES (%s, 'phase', 'grasp', 1, 2)",
            [(i,) for i in ids],
        )
    return ids


def normalize(value: Any) -> Any:
    """One comparable form for a value read from Postgres or from DuckDB."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, Decimal):
        return str(value.normalize())
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def table_columns(conn: psycopg.Connection[Any], table: str) -> tuple[list[str], set[str]]:
    """A Postgres table's columns in order, and which of them hold JSON."""
    columns = [
        str(c)
        for (c,) in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            (table,),
        )
    ]
    json_columns = {
        str(c)
        for (c,) in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND atttypid IN ('jsonb'::regtype, 'json'::regtype)",
            (table,),
        )
    }
    return columns, json_columns


def source_rows(
    conn: psycopg.Connection[Any], table: str, columns: list[str]
) -> list[tuple[Any, ...]]:
    query = psycopg.sql.SQL("SELECT {} FROM {}").format(
        psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, columns)),
        psycopg.sql.Identifier(table),
    )
    return sorted(tuple(normalize(v) for v in row) for row in conn.execute(query))


def warehouse_rows(
    lake: DuckLakeWarehouse, table: str, columns: list[str], json_columns: set[str]
) -> list[tuple[Any, ...]]:
    names = ", ".join(f'"{c}"' for c in columns)
    rows = lake.query_arrow(
        f"SELECT {names} FROM mirror.{table} WHERE NOT _deleted", max_rows=10_000_000
    ).to_pylist()
    out = []
    for row in rows:
        values = []
        for column in columns:
            value = row[column]
            if column in json_columns and value is not None:
                value = json.loads(value)
            values.append(normalize(value))
        out.append(tuple(values))
    return sorted(out)


def assert_mirrored(conn: psycopg.Connection[Any], lake: DuckLakeWarehouse) -> int:
    """Every mirrored table equals Postgres row for row, and no key appears twice; returns
    the number of rows compared."""
    total = 0
    for table in MIRRORED:
        columns, json_columns = table_columns(conn, table)
        expected = source_rows(conn, table, columns)
        actual = warehouse_rows(lake, table, columns, json_columns)
        assert actual == expected, f"{table} differs from Postgres"
        key = ", ".join(f'"{k}"' for k in lake.mirrored_tables()[table])
        dupes = lake.query_arrow(
            f"SELECT {key}, count(*) AS n FROM mirror.{table} GROUP BY ALL HAVING n > 1"
        ).num_rows
        assert dupes == 0, f"{table} holds a key twice"
        total += len(expected)
    return total
