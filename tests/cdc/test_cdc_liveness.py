"""Liveness judged from Postgres (cdc/liveness.py): a follower process killed, paused, failed
or stopped reads as down or stalled within 10 s, through the library and through
``quarry cdc status --json`` run as from another machine (no state folder of the follower's:
no pid, no status file to read)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.config import CdcConfig
from cdc.errors import PreflightError
from cdc.follower import follow
from cdc.liveness import Liveness, Observation, WriterRow, judge, liveness_at
from tests.cdc.conftest import seed, wait_until
from tests.fixtures.stack import QUARRY
from warehouse.changes import format_lsn
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse

WITHIN_S = 10.0


def _env(pg_dsn: str, config: DuckLakeConfig, slot: str) -> dict[str, str]:
    assert config.catalog_dsn is not None
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")},
        "QUARRY_SOURCE_DSN": pg_dsn,
        "QUARRY_WAREHOUSE__CATALOG_DSN": config.catalog_dsn.get_secret_value(),
        "QUARRY_WAREHOUSE__DATA_PATH": str(config.data_path),
        "QUARRY_CDC__SLOT": slot,
        "QUARRY_CDC__POLL_INTERVAL_S": "0.05",
        "QUARRY_CDC__HEARTBEAT_INTERVAL_S": "1",
    }


@contextmanager
def follower_process(
    pg_dsn: str, config: DuckLakeConfig, slot: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m cdc follow`` streaming (no status file); killed at the end if still there."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cdc", "follow"],
        env=_env(pg_dsn, config, slot),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(
            lambda: liveness_at(pg_dsn, slot).healthy, timeout_s=60, what="the follower to stream"
        )
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
        process.wait(30)


def cdc_status(pg_dsn: str, config: DuckLakeConfig, slot: str, state: Path) -> tuple[int, Any]:
    """``quarry cdc status --json`` with the follower's settings and a state folder of its own."""
    result = subprocess.run(
        [QUARRY, "cdc", "status", "--json", "--state-dir", str(state)],
        env=_env(pg_dsn, config, slot),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.returncode, json.loads(result.stdout)


def wait_for_state(dsn: str, slot: str, state: str, since: float) -> Liveness:
    """Poll until ``slot`` is judged ``state``; the judgement must come within WITHIN_S of
    ``since`` (a monotonic time)."""
    found: list[Liveness] = []

    def reached() -> bool:
        found.append(liveness_at(dsn, slot))
        return found[-1].state == state

    wait_until(reached, timeout_s=WITHIN_S + 5, what=f"{slot} to read {state}")
    assert time.monotonic() - since <= WITHIN_S, f"{state} after {time.monotonic() - since} s"
    return found[-1]


def test_a_killed_follower_reads_down_at_once(
    pg_conn: psycopg.Connection[Any],
    pg_dsn: str,
    warehouse: DuckLakeWarehouse,
    warehouse_config: DuckLakeConfig,
    cdc_config: CdcConfig,
    tmp_path: Path,
) -> None:
    seed(pg_conn, 3)
    slot = cdc_config.slot
    with follower_process(pg_dsn, warehouse_config, slot) as process:
        code, doc = cdc_status(pg_dsn, warehouse_config, slot, tmp_path / "elsewhere")
        assert code == 0, doc
        assert doc["state"] == "streaming" and doc["healthy"] and doc["kind"] == "follower"
        assert doc["pid"] == process.pid and doc["connected"] is True
        assert doc["last_seen_s"] < 5 and doc["warehouse_lag_s"] is not None
        assert doc["status"]["snapshot_rows"] == 3 * 4 + 2  # the follower's own figures
        assert not (tmp_path / "elsewhere" / "run" / "cdc-status.json").exists()

        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        process.wait(30)
        live = wait_for_state(pg_dsn, slot, "down", killed_at)
        assert live.reported_state == "streaming" and live.connected is False
        assert live.reason is not None and "no replication connection" in live.reason
        code, doc = cdc_status(pg_dsn, warehouse_config, slot, tmp_path / "elsewhere")
        assert code == 3 and doc["state"] == "down" and doc["healthy"] is False
        assert "last_error" in doc and doc["reason"] == live.reason


def test_a_paused_follower_reads_stalled_and_recovers(
    pg_conn: psycopg.Connection[Any],
    pg_dsn: str,
    warehouse: DuckLakeWarehouse,
    warehouse_config: DuckLakeConfig,
    cdc_config: CdcConfig,
) -> None:
    seed(pg_conn, 2)
    slot = cdc_config.slot
    with follower_process(pg_dsn, warehouse_config, slot) as process:
        os.kill(process.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        pg_conn.execute("UPDATE episodes SET steps = steps + 1")  # WAL the follower misses
        live = wait_for_state(pg_dsn, slot, "stalled", stopped_at)
        assert live.connected is True  # its connection is open: not down, stalled
        # With 1 s heartbeats the position rule (3 s) may speak before the silence rule (5 s).
        assert live.reason is not None
        assert live.reason.startswith(("no report for", "its position")), live.reason
        assert live.wal_behind_bytes is not None and live.wal_behind_bytes > 0

        os.kill(process.pid, signal.SIGCONT)
        wait_for_state(pg_dsn, slot, "streaming", time.monotonic())

        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        stopped = liveness_at(pg_dsn, slot)
        assert stopped.state == "down" and stopped.reported_state == "stopped"
        assert stopped.reason == "it stopped"


def test_a_follower_that_failed_reads_down_with_its_error(
    pg_conn: psycopg.Connection[Any],
    pg_dsn: str,
    warehouse: DuckLakeWarehouse,
    warehouse_config: DuckLakeConfig,
    cdc_config: CdcConfig,
) -> None:
    seed(pg_conn, 1)
    slot = cdc_config.slot
    with follower_process(pg_dsn, warehouse_config, slot) as process:
        dropped_at = time.monotonic()
        while process.poll() is None and time.monotonic() - dropped_at < 30:
            pg_conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active_pid IS NOT NULL",
                (slot,),
            )
            try:
                pg_conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg.errors.ObjectInUse:
                time.sleep(0.05)  # it reconnected first
            except psycopg.errors.UndefinedObject:
                time.sleep(0.05)  # dropped already; the follower is on its way out
        assert process.wait(30) == 2
    live = liveness_at(pg_dsn, slot)
    assert live.state == "down" and live.reported_state == "failed"
    assert live.last_error is not None and live.last_error.startswith("SlotDroppedError")
    assert live.reason == f"it failed: {live.last_error}" and live.errors_total >= 1


def test_never_reported_and_unreachable_read_down(pg_dsn: str) -> None:
    never = liveness_at(pg_dsn, "nobody_here")
    assert never.state == "down" and never.kind is None
    assert never.reason == "no CDC writer has reported for slot 'nobody_here'"
    gone = liveness_at("host=/nonexistent-socket-dir dbname=quarry", "s")
    assert gone.state == "down" and gone.reason is not None
    assert gone.reason.startswith("cannot read the CDC writers' reports:")


@pytest.mark.parametrize(
    ("advance_s", "wal_past", "expected"),
    [(31.0, True, "stalled"), (31.0, False, "streaming"), (29.0, True, "streaming")],
)
def test_a_position_that_stops_advancing_behind_the_wal_is_stalled(
    advance_s: float, wal_past: bool, expected: str
) -> None:
    """The follower reports (its reporter thread runs) but its position stays put: stalled
    after 3 heartbeat intervals, only while the source has WAL past it."""
    position = 0x1000
    writer = WriterRow(
        kind="follower",
        state="streaming",
        host="h",
        pid=1,
        position_lsn=position,
        seen_s=0.5,
        advance_s=advance_s,
        commit_s=advance_s,
        report_interval_s=1.0,
        advance_interval_s=10.0,
        last_error=None,
        last_error_at=None,
        errors_total=0,
        started_at=datetime.now(UTC),
        status=None,
    )
    live = judge(Observation("s", writer, True, position + (64 if wal_past else 0)))
    assert live.state == expected
    if expected == "stalled":
        assert live.reason == (
            f"its position {format_lsn(position)} has not advanced for 31.0 s (more than 30 s)"
            f" while the source's WAL is at {format_lsn(position + 64)}"
        )


def test_a_source_without_the_reports_table_is_refused_at_preflight(
    pg_conn: psycopg.Connection[Any],
    pg_dsn: str,
    warehouse: DuckLakeWarehouse,
    cdc_config: CdcConfig,
) -> None:
    pg_conn.execute("DROP TABLE cdc_writers")
    with pytest.raises(PreflightError, match=r"cdc_writers does not exist .* migrations"):
        follow(pg_dsn, warehouse, cdc_config, threading.Event())
    assert warehouse.position() is None  # refused before anything was taken
    live = liveness_at(pg_dsn, cdc_config.slot)
    assert live.state == "down" and live.reason is not None
    assert live.reason.endswith(
        "table cdc_writers is missing: apply Quarry's migrations (sql/postgres/)"
    )
