"""The follower against a real Postgres (pgoutput) and a real DuckLake warehouse."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.config import CdcConfig
from cdc.errors import PreflightError, SlotDroppedError
from cdc.follower import follow
from cdc.slot import drop_slot
from cdc.status import read_status
from cdc.stream import ChangeStream
from tests.cdc.conftest import (
    assert_mirrored,
    caught_up,
    current_lsn,
    insert_episodes,
    running,
    seed,
    wait_until,
)
from warehouse.changes import ChangeBatch
from warehouse.config import WarehouseConfig
from warehouse.ducklake.backend import DuckLakeWarehouse

Conn = psycopg.Connection[tuple[Any, ...]]


def test_snapshot_then_stream_mirrors_every_table(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig, tmp_path: Path
) -> None:
    ids = seed(pg_conn, 30)
    status_path = tmp_path / "cdc.json"
    with running(pg_dsn, warehouse, cdc_config, status_path) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower), what="initial snapshot")
        snapshot_lsn = warehouse.position().snapshot_lsn  # type: ignore[union-attr]
        insert_episodes(pg_conn, 5)
        pg_conn.execute(
            "UPDATE episodes SET success = false, steps = steps + 1 WHERE id = ANY(%s::uuid[])",
            (ids[:10],),
        )
        pg_conn.execute("DELETE FROM episodes WHERE id = ANY(%s::uuid[])", (ids[10:15],))
        pg_conn.execute("UPDATE episodes SET status = 'retracted' WHERE id = %s", (ids[20],))
        wait_until(caught_up(pg_conn, warehouse, follower), what="streamed changes")
        assert assert_mirrored(pg_conn, warehouse) > 100
        live = warehouse.query_arrow("SELECT count(*) AS n FROM episodes").to_pylist()
        assert live == [{"n": 30 + 5 - 5 - 1}]
        assert warehouse.position().snapshot_lsn == snapshot_lsn  # type: ignore[union-attr]
        status = read_status(status_path)
        assert status is not None and status.state == "streaming"
        assert status.pid == os.getpid() and status.batches_total >= 1
        assert status.lag_s is not None and status.snapshot_rows == 30 * 4 + 2


def test_insert_during_snapshot_leaves_no_gap_and_no_duplicate(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    seed(pg_conn, 2000)
    done = threading.Event()

    def write() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            while not done.is_set():
                insert_episodes(conn, 3)

    # Large tables are read in page ranges by parallel workers, all in the exported snapshot.
    config = cdc_config.model_copy(update={"snapshot_split_pages": 1, "snapshot_workers": 3})
    writer = threading.Thread(target=write)
    writer.start()
    try:
        with running(pg_dsn, warehouse, config) as follower:
            wait_until(lambda: bool(follower.reports), what="first streamed batch")
            done.set()
            writer.join()
            wait_until(caught_up(pg_conn, warehouse, follower), what="catch up")
            assert_mirrored(pg_conn, warehouse)
    finally:
        done.set()
        writer.join()


def test_truncate_and_schema_change(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    seed(pg_conn, 5)
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
        pg_conn.execute("TRUNCATE episode_labels")
        pg_conn.execute("ALTER TABLE robots ADD COLUMN serial text")
        pg_conn.execute(
            "INSERT INTO robots (id, model, site, serial) VALUES ('r2', 'arm', 'lab', 'SN-2')"
        )
        with pg_conn.transaction():
            # manifest_pulls (not published) references manifests: truncated with it
            pg_conn.execute("TRUNCATE manifests, manifest_pulls")
            pg_conn.execute(
                "INSERT INTO manifests (id, reuse_key, sql, sample_spec, "
                "snapshot_id, cdc_position, rows, samples, size_bytes, uri, author)"
                " VALUES ('m1', 'k', 'SELECT 1', '{}', 1, '0/0', 1, 1, 1, 'u', 'a')"
            )
        wait_until(caught_up(pg_conn, warehouse, follower))
        pg_conn.execute("ALTER TABLE robots DROP COLUMN serial")  # the warehouse keeps it
        assert warehouse.query_arrow("SELECT count(*) AS n FROM episode_labels").to_pylist() == [
            {"n": 0}
        ]
        serial = warehouse.query_arrow("SELECT serial FROM mirror.robots WHERE id = 'r2'")
        assert serial.to_pylist() == [{"serial": "SN-2"}]
        assert warehouse.query_arrow("SELECT id FROM manifests").to_pylist() == [{"id": "m1"}]
        assert_mirrored(pg_conn, warehouse)


def test_unchanged_toast_value_is_kept(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    (episode,) = seed(pg_conn, 1)
    big = {"noise": os.urandom(20_000).hex()}  # incompressible: stored out of line
    pg_conn.execute("UPDATE episodes SET qc_report = %s WHERE id = %s", (json.dumps(big), episode))
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
        pg_conn.execute("UPDATE episodes SET steps = 1 WHERE id = %s", (episode,))
        wait_until(caught_up(pg_conn, warehouse, follower))
        rows = warehouse.query_arrow("SELECT steps, qc_report FROM episodes").to_pylist()
        assert rows[0]["steps"] == 1 and json.loads(rows[0]["qc_report"]) == big
        assert_mirrored(pg_conn, warehouse)


def test_restart_resumes_exactly_where_it_stopped(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    seed(pg_conn, 10)
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
    first = warehouse.position()
    ids = insert_episodes(pg_conn, 10)
    pg_conn.execute("DELETE FROM episodes WHERE id = %s", (ids[0],))
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
        assert follower.reports and sum(r.changes for r in follower.reports) == 10 * 4 + 4
    assert warehouse.position().snapshot_lsn == first.snapshot_lsn  # type: ignore[union-attr]
    assert_mirrored(pg_conn, warehouse)


def test_crash_between_warehouse_commit_and_slot_advance(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    seed(pg_conn, 3)
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
    ids = insert_episodes(pg_conn, 4)
    pg_conn.execute("UPDATE episodes SET steps = 5 WHERE id = %s", (ids[0],))
    # Do what the follower does, but "crash" before confirming the slot.
    # The stream may hand the two transactions over in one batch or two (a loaded machine).
    stream = ChangeStream(pg_dsn, cdc_config, warehouse)
    position = warehouse.position()
    assert position is not None
    try:
        stream.start(position.lsn)
        target = current_lsn(pg_conn)
        batches: list[ChangeBatch] = []
        changes = 0
        while position.lsn < target:
            pending = stream.take(5.0)
            assert pending is not None, "the stream delivered nothing"
            batches.append(pending.change_batch(position))
            position = batches[-1].position
            changes += pending.changes
    finally:
        stream.close()
    assert changes == 4 * 4 + 1
    for batch in batches:
        warehouse.apply(batch)
    mirrored = warehouse.query_arrow("SELECT * FROM mirror.episodes ORDER BY id").to_pylist()
    for batch in batches:
        warehouse.apply(batch)  # a replayed batch changes nothing (LSN guard)
    assert (
        warehouse.query_arrow("SELECT * FROM mirror.episodes ORDER BY id").to_pylist() == mirrored
    )
    with running(pg_dsn, warehouse, cdc_config) as follower:
        pg_conn.execute("UPDATE episodes SET steps = 6 WHERE id = %s", (ids[1],))
        wait_until(caught_up(pg_conn, warehouse, follower))
        # the restart skipped what the warehouse already held
        assert sum(r.changes for r in follower.reports) == 1
    assert_mirrored(pg_conn, warehouse)


def test_new_episode_is_visible_within_seconds(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    seed(pg_conn, 1)
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
        (episode,) = insert_episodes(pg_conn, 1)
        seconds = wait_until(
            lambda: (
                warehouse.query_arrow(f"SELECT id FROM episodes WHERE id = '{episode}'").num_rows
                == 1
            ),
            timeout_s=5,
        )
        assert seconds < 2.0
        assert follower.reports[-1].lags_s[0] < 2.0


def test_quiet_slot_advances_with_heartbeats(
    pg_conn: Conn, pg_dsn: str, postgres: Any, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    seed(pg_conn, 1)
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
        start = warehouse.position().lsn  # type: ignore[union-attr]
        with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as other:
            other.execute("CREATE TEMP TABLE noise AS SELECT generate_series(1, 10000) AS n")
        wait_until(
            lambda: warehouse.position().lsn > start,
            timeout_s=10,  # type: ignore
            what="a heartbeat",
        )
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (cdc_config.slot,),
        ).fetchone()
    assert row is not None
    assert_mirrored(pg_conn, warehouse)


def test_missing_publication_is_an_actionable_error(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    pg_conn.execute("DROP PUBLICATION quarry_cdc")
    with pytest.raises(PreflightError, match="CREATE PUBLICATION"):
        follow(pg_dsn, warehouse, cdc_config, threading.Event())


def test_dropped_slot_is_an_actionable_error(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig, tmp_path: Path
) -> None:
    seed(pg_conn, 1)
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
    drop_slot(pg_conn, cdc_config.slot)
    status_path = tmp_path / "cdc.json"
    with pytest.raises(SlotDroppedError, match="resnapshot"):
        follow(pg_dsn, warehouse, cdc_config, threading.Event(), status_path)
    status = read_status(status_path)
    assert status is not None and status.state == "failed"
    assert status.last_error is not None and "SlotDroppedError" in status.last_error
    # an explicit re-snapshot recovers
    insert_episodes(pg_conn, 2)
    resnapshot = cdc_config.model_copy(update={"resnapshot": True})
    with running(pg_dsn, warehouse, resnapshot) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
    assert_mirrored(pg_conn, warehouse)


def test_status_reports_lag_after_each_batch(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig, tmp_path: Path
) -> None:
    status_path = tmp_path / "status" / "cdc.json"
    seed(pg_conn, 1)
    with running(pg_dsn, warehouse, cdc_config, status_path) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
        insert_episodes(pg_conn, 1)
        wait_until(caught_up(pg_conn, warehouse, follower))
        time.sleep(1.2)
        status = read_status(status_path)
    assert status is not None
    assert status.position_lsn is not None and status.slot == cdc_config.slot
    assert status.lag_s is not None and 0 <= status.lag_s <= status.max_lag_s < 5  # type: ignore
    assert status.slot_lag_bytes is not None and status.last_error is None
    final = read_status(status_path)
    assert final is not None and final.state == "stopped"


def test_table_added_to_the_publication_is_backfilled(
    pg_conn: Conn, pg_dsn: str, warehouse: DuckLakeWarehouse, cdc_config: CdcConfig
) -> None:
    seed(pg_conn, 2)
    pg_conn.execute("CREATE TABLE sites (id text PRIMARY KEY, name text NOT NULL)")
    pg_conn.execute("INSERT INTO sites SELECT 's' || g, 'site ' || g FROM generate_series(1, 50) g")
    with running(pg_dsn, warehouse, cdc_config) as follower:
        wait_until(caught_up(pg_conn, warehouse, follower))
        assert "sites" not in warehouse.mirrored_tables()
        pg_conn.execute("ALTER PUBLICATION quarry_cdc ADD TABLE sites")
        pg_conn.execute("UPDATE sites SET name = 'renamed' WHERE id = 's1'")
        pg_conn.execute("DELETE FROM sites WHERE id = 's2'")
        pg_conn.execute("INSERT INTO sites VALUES ('s51', 'new')")
        wait_until(caught_up(pg_conn, warehouse, follower))
        wait_until(lambda: not warehouse.unloaded_tables(), what="the backfill")
        pg_conn.execute("UPDATE sites SET name = 'again' WHERE id = 's3'")
        wait_until(caught_up(pg_conn, warehouse, follower))
    expected = sorted(pg_conn.execute("SELECT id, name FROM sites").fetchall())
    mirrored = warehouse.query_arrow(
        "SELECT id, name FROM mirror.sites WHERE NOT _deleted ORDER BY id"
    ).to_pylist()
    assert sorted((r["id"], r["name"]) for r in mirrored) == expected and len(expected) == 50
    assert_mirrored(pg_conn, warehouse)


class FailingApplies(DuckLakeWarehouse):
    """A real lake whose next ``failures`` applies raise an error of no kind the follower
    knows (as a bug or an unclassified library error would), before anything commits."""

    def __init__(self, config: WarehouseConfig, failures: int) -> None:
        super().__init__(config)
        self.failures = failures

    def apply(self, batch: ChangeBatch) -> int:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("injected: an error of no known kind")
        return super().apply(batch)


@pytest.fixture
def failing_lake(warehouse_config: WarehouseConfig) -> Iterator[FailingApplies]:
    """This test's lake, bootstrapped, failing no apply until the test sets ``failures``."""
    lake = FailingApplies(warehouse_config, failures=0)
    lake.bootstrap()
    yield lake
    lake.close()


def test_an_unexpected_error_is_retried_and_loses_nothing(
    pg_conn: Conn,
    pg_dsn: str,
    failing_lake: FailingApplies,
    cdc_config: CdcConfig,
    tmp_path: Path,
) -> None:
    lake = failing_lake
    config = cdc_config.model_copy(update={"retry_initial_s": 0.05})
    status_path = tmp_path / "cdc.json"
    seed(pg_conn, 3)
    with running(pg_dsn, lake, config, status_path) as follower:
        wait_until(caught_up(pg_conn, lake, follower))
        lake.failures = 2
        insert_episodes(pg_conn, 5)
        wait_until(caught_up(pg_conn, lake, follower))
    status = read_status(status_path)
    assert status is not None and status.state == "stopped"
    assert status.errors_total == 2
    assert status.last_error == "RuntimeError: injected: an error of no known kind"
    assert_mirrored(pg_conn, lake)


def test_a_persistent_unexpected_error_stops_the_follower(
    pg_conn: Conn,
    pg_dsn: str,
    failing_lake: FailingApplies,
    cdc_config: CdcConfig,
    tmp_path: Path,
) -> None:
    failing_lake.failures = 1_000
    config = cdc_config.model_copy(update={"retry_initial_s": 0.05, "unexpected_retries": 2})
    status_path = tmp_path / "cdc.json"
    seed(pg_conn, 1)
    with pytest.raises(RuntimeError, match="injected"):
        follow(pg_dsn, failing_lake, config, threading.Event(), status_path)
    assert failing_lake.failures == 1_000 - 3  # the first try and two retries
    status = read_status(status_path)
    assert status is not None and status.state == "failed"
    assert status.last_error == "RuntimeError: injected: an error of no known kind"
