"""Fault tests: SIGKILL the follower process during a sustained write load, many rounds, and
restart Postgres under it; afterwards every mirrored table equals Postgres row for row."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.config import CdcConfig
from cdc.status import FollowerStatus, read_status
from quarry.stack.migrations import apply_migrations
from quarry.stack.paths import StatePaths
from quarry.stack.postgres import EmbeddedPostgres
from tests.cdc.conftest import (
    assert_mirrored,
    caught_up,
    insert_episodes,
    running,
    seed,
    wait_until,
)
from tests.fixtures.postgres import SQL_DIR
from tests.fixtures.warehouse import new_warehouse_config
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse

pytestmark = pytest.mark.slow


class Load:
    """Inserts, updates and deletes on the source from a thread, until stopped; rides out a
    Postgres restart."""

    def __init__(self, dsn: str, seed_ids: list[str]) -> None:
        self._dsn, self._ids = dsn, list(seed_ids)
        self._stop = threading.Event()
        self.transactions = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(7)
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._dsn, autocommit=True) as conn:
                    while not self._stop.is_set():
                        self._round(conn, rng)
                        time.sleep(0.01)
            except psycopg.OperationalError:
                time.sleep(0.2)

    def _round(self, conn: psycopg.Connection[Any], rng: random.Random) -> None:
        self._ids += insert_episodes(conn, 3)
        with conn.transaction():
            for episode in rng.sample(self._ids, 3):
                conn.execute(
                    "UPDATE episodes SET steps = steps + 1, success = NOT success WHERE id = %s",
                    (episode,),
                )
            gone = self._ids.pop(rng.randrange(len(self._ids)))
            conn.execute("DELETE FROM episodes WHERE id = %s", (gone,))
        self.transactions += 2

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def _follower(
    pg_dsn: str, config: DuckLakeConfig, slot: str, status: Path
) -> subprocess.Popen[bytes]:
    assert config.catalog_dsn is not None
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")},
        "QUARRY_SOURCE_DSN": pg_dsn,
        "QUARRY_WAREHOUSE__CATALOG_DSN": config.catalog_dsn.get_secret_value(),
        "QUARRY_WAREHOUSE__DATA_PATH": str(config.data_path),
        "QUARRY_CDC__SLOT": slot,
        "QUARRY_CDC__POLL_INTERVAL_S": "0.05",
        "QUARRY_CDC__HEARTBEAT_INTERVAL_S": "1",
        "QUARRY_CDC__MAINTENANCE_INTERVAL_S": "2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cdc", "follow", "--status", str(status)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_sigkill_during_load_loses_and_duplicates_nothing(
    pg_conn: psycopg.Connection[Any],
    pg_dsn: str,
    warehouse: DuckLakeWarehouse,
    warehouse_config: DuckLakeConfig,
    cdc_config: CdcConfig,
    tmp_path: Path,
) -> None:
    load = Load(pg_dsn, seed(pg_conn, 300))
    status = tmp_path / "cdc.json"
    rng = random.Random(11)
    kills = 0
    try:
        process = _follower(pg_dsn, warehouse_config, cdc_config.slot, status)
        wait_until(
            lambda: (read_status(status) or FollowerStatus(slot="")).state == "streaming",
            timeout_s=60,
            what="the initial snapshot",
        )
        for _ in range(8):
            time.sleep(rng.uniform(0.5, 2.5))  # mid-batch, mid-commit, or still starting up
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            kills += 1
            process = _follower(pg_dsn, warehouse_config, cdc_config.slot, status)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        load.stop()
    process = _follower(pg_dsn, warehouse_config, cdc_config.slot, status)
    try:
        wait_until(caught_up(pg_conn, warehouse), timeout_s=60, what="catch up after kills")
    finally:
        process.terminate()
        process.wait(30)
    assert kills == 8 and load.transactions > 50
    assert_mirrored(pg_conn, warehouse)
    final = read_status(status)
    assert final is not None and final.state == "stopped" and final.snapshot_rows is None


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A server of this test's own, outside pytest's temp root (a concurrent pytest run resets
    that folder's mode, which would lock the server's own user out of its files)."""
    root = Path(tempfile.mkdtemp(prefix="quarry-restart-"))
    paths = StatePaths.at(root)
    paths.ensure()
    server = EmbeddedPostgres(paths)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_restart_under_load(own_postgres: EmbeddedPostgres, tmp_path: Path) -> None:
    own_postgres.ensure_database("quarry")
    apply_migrations(own_postgres.dsn("quarry"), SQL_DIR)
    lake_config = new_warehouse_config(own_postgres, tmp_path)  # catalog on the same server
    dsn = own_postgres.dsn("quarry")
    config = CdcConfig(
        slot="restart",
        poll_interval_s=0.05,
        heartbeat_interval_s=1.0,
        retry_initial_s=0.2,
        retry_max_s=1.0,
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        load = Load(dsn, seed(conn, 100))
    try:
        with DuckLakeWarehouse(lake_config) as lake:
            lake.bootstrap()
            with running(dsn, lake, config) as follower:
                time.sleep(1.5)
                own_postgres.stop()
                time.sleep(1.0)
                own_postgres.start()
                time.sleep(1.5)
                load.stop()
                with psycopg.connect(dsn, autocommit=True) as conn:
                    wait_until(caught_up(conn, lake, follower), timeout_s=60)
                    assert_mirrored(conn, lake)
                    assert load.transactions > 10
    finally:
        load.stop()
