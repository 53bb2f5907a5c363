"""`quarry up / status / down` through the real console script, and restarts losing nothing."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import httpx
import psycopg

from quarry.stack import processes
from quarry.stack.lifecycle import Stack
from quarry.stack.paths import StatePaths
from quarry.stack.postgres import EmbeddedPostgres
from tests.fixtures.stack import run_json, run_quarry


def test_up_status_down_up_keeps_state(state: Path) -> None:
    try:
        up = run_json(state, "up")
        assert up["healthy"] and up["service_url"].startswith("http://127.0.0.1:")
        status = run_json(state, "status")
        assert status["healthy"]
        assert set(status["parts"]) == {"postgres", "cdc", "service", "worker"}
        worker = status["parts"]["worker"]
        assert worker["executor_id"] == "stack" and processes.is_alive(worker["pid"], str(state))
        assert httpx.get(status["service_url"] + "/healthz").json() == {"status": "ok"}

        dsn = EmbeddedPostgres(StatePaths.at(state)).dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO tasks (id, description) VALUES ('kept', 'survives down')")
        token = (state / "admin.token").read_text()
        assert stat.S_IMODE((state / "admin.token").stat().st_mode) == 0o600

        run_quarry(state, "down")
        down = run_quarry(state, "status", "--json", check=False)
        assert down.returncode == 3
        assert not processes.is_alive(worker["pid"], str(state))  # down stops the worker
        assert json.loads(down.stdout)["parts"]["worker"] == {
            "healthy": False,
            "error": "not running",
        }

        again = run_json(state, "up")
        assert again["healthy"]
        assert again["service_url"] == up["service_url"]  # the service keeps its port
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT description FROM tasks WHERE id = 'kept'").fetchone() == (
                "survives down",
            )
        assert (state / "admin.token").read_text() == token
    finally:
        run_quarry(state, "down", check=False)


def test_up_twice_is_idempotent(state: Path) -> None:
    try:
        first = run_json(state, "up")
        second = run_json(state, "up")
        assert first["parts"]["service"]["pid"] == second["parts"]["service"]["pid"]
    finally:
        run_quarry(state, "down", check=False)


def test_down_without_up_is_harmless(state: Path) -> None:
    assert run_quarry(state, "down").returncode == 0


def test_status_reports_cdc_lag(stack: Stack) -> None:
    cdc = stack.status().parts["cdc"]
    log = stack.paths.logs / "cdc.log"
    assert cdc.healthy, f"{cdc.detail}\n{log.read_text()[-4000:] if log.exists() else ''}"
    assert cdc.detail["state"] == "streaming"
    assert cdc.detail["lag_s"] is None or cdc.detail["lag_s"] >= 0


def test_killed_service_is_restarted_by_up(state: Path) -> None:
    try:
        first = run_json(state, "up")
        os.kill(first["parts"]["service"]["pid"], signal.SIGKILL)
        assert run_quarry(state, "status", "--json", check=False).returncode == 3
        again = run_json(state, "up")
        assert again["healthy"]
        assert again["service_url"] == first["service_url"]  # the service keeps its port
        assert again["parts"]["service"]["pid"] != first["parts"]["service"]["pid"]
    finally:
        run_quarry(state, "down", check=False)


def test_status_says_how_a_dead_follower_ended(state: Path) -> None:
    """A follower killed outright is "not running" with its log; one that stopped on an
    error (its slot dropped under it) says which error, from its last status."""
    try:
        up = run_json(state, "up")
        os.kill(up["parts"]["cdc"]["pid"], signal.SIGKILL)
        killed = run_quarry(state, "status", "--json", check=False)
        assert killed.returncode == 3
        cdc = json.loads(killed.stdout)["parts"]["cdc"]
        assert cdc["healthy"] is False
        assert cdc["error"] == "not running"
        assert cdc["last_state"] == "streaming"
        assert cdc["log"] == str(state / "logs" / "cdc.log")

        again = run_json(state, "up")  # a new follower, resuming from the warehouse
        _drop_slot_under(state, again["parts"]["cdc"]["pid"])
        text = run_quarry(state, "status", check=False)
        assert text.returncode == 3
        assert "cdc         DOWN (not running: SlotDroppedError" in text.stdout
        assert f"see {state / 'logs' / 'cdc.log'}" in text.stdout
    finally:
        run_quarry(state, "down", check=False)


def _drop_slot_under(state: Path, follower_pid: int, timeout_s: float = 60.0) -> None:
    """Drop the follower's slot (ending its stream first) and wait until it has exited."""
    dsn = EmbeddedPostgres(StatePaths.at(state)).dsn()
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE active_pid IS NOT NULL"
            )
            try:
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots")
                break
            except psycopg.errors.ObjectInUse:
                time.sleep(0.05)  # the follower reconnected first; end that stream too
    marker = str(StatePaths.at(state).root)
    while time.monotonic() < deadline and processes.is_alive(follower_pid, marker):
        time.sleep(0.1)
    assert not processes.is_alive(follower_pid, marker), "the follower ran on without its slot"
