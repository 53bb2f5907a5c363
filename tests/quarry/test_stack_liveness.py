"""The embedded stack's follower paused (SIGSTOP) and then killed (SIGKILL): `quarry cdc
status --json`, `quarry status --json`, `/readyz` and `/metrics` say stalled, then down,
within 10 s; a curation pinned while the follower is stopped carries its warehouse lag and
is refused (409) or warned about past `curation.max_lag_s`, through the real HTTP service."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from curation.config import CurationConfig
from quarry.settings import Settings
from service.app import create_app
from tests.fixtures.serving import served
from tests.fixtures.stack import run_json, run_quarry

WITHIN_S = 10.0
PROBLEM = "application/problem+json"


def cli_cdc(state: Path) -> dict[str, Any]:
    result = run_quarry(state, "cdc", "status", "--json", check=False)
    doc = json.loads(result.stdout)
    assert result.returncode == (0 if doc["healthy"] else 3), result
    return {"state": doc["state"], "doc": doc}


def cli_stack(state: Path) -> dict[str, Any]:
    result = run_quarry(state, "status", "--json", check=False)
    cdc = json.loads(result.stdout)["parts"]["cdc"]
    return {"state": cdc["state"], "doc": cdc, "code": result.returncode}


def readyz(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/readyz", timeout=30)
    body = response.json()
    assert response.status_code == 200 and body["ready"], body  # cdc is not required
    return {"state": body["checks"]["cdc"]["state"], "doc": body["checks"]["cdc"]}


def metrics(url: str) -> dict[str, Any]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = {
        (s.name, s.labels.get("state")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("quarry_cdc_")
    }
    states = [state for (name, state), v in found.items() if name == "quarry_cdc_state" and v]
    return {"state": states[0], "doc": found}


def within(probe: Callable[[], dict[str, Any]], state: str, since: float) -> dict[str, Any]:
    """Poll ``probe`` until it answers ``state``; the answering call must have started within
    WITHIN_S of ``since`` (a monotonic time)."""
    deadline = since + WITHIN_S + 20
    while True:
        started = time.monotonic()
        answer = probe()
        if answer["state"] == state:
            assert started - since <= WITHIN_S, f"{state} only after {started - since:.1f} s"
            return answer
        assert time.monotonic() < deadline, f"still {answer['state']}, not {state}: {answer}"
        time.sleep(0.2)


def within_all(surfaces: dict[str, Callable[[], dict[str, Any]]], state: str, since: float) -> None:
    """:func:`within` on every surface at once, each polled from its own thread: each surface
    is judged by its own answer's start, not behind the others' (slow) probes."""
    with ThreadPoolExecutor(len(surfaces)) as pool:
        waits = {name: pool.submit(within, probe, state, since) for name, probe in surfaces.items()}
        for name, wait in waits.items():
            try:
                wait.result()
            except AssertionError as error:
                raise AssertionError(f"{name}: {error}") from error


@contextmanager
def service(state: Path, curation: CurationConfig) -> Iterator[httpx.Client]:
    """The real app over the stack's state folder with its own curation settings, served by
    uvicorn on loopback, as the stack's admin."""
    settings = Settings(state_dir=state, curation=curation)
    token = (state / "admin.token").read_text().strip()
    with (
        served(create_app(settings.service_settings())) as url,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client,
    ):
        yield client


def test_paused_then_killed_follower_on_every_surface(state: Path) -> None:
    try:
        up = run_json(state, "up")
        pid, url = up["parts"]["cdc"]["pid"], up["service_url"]
        surfaces = {
            "cdc status": lambda: cli_cdc(state),
            "status": lambda: cli_stack(state),
            "/readyz": lambda: readyz(url),
            "/metrics": lambda: metrics(url),
        }
        for name, probe in surfaces.items():
            assert probe()["state"] == "streaming", name
        assert metrics(url)["doc"][("quarry_cdc_up", None)] == 1

        os.kill(pid, signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            within_all(surfaces, "stalled", stopped_at)
            stalled = cli_stack(state)
            assert stalled["code"] == 3 and stalled["doc"]["last_state"] == "streaming"
            assert "last_error" in stalled["doc"] and stalled["doc"]["reason"]
            assert "STALLED (" in run_quarry(state, "status", check=False).stdout
            _curations_see_the_lag(state, stopped_at)
        finally:
            os.kill(pid, signal.SIGCONT)
        within(surfaces["/readyz"], "streaming", time.monotonic())

        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        within_all(surfaces, "down", killed_at)
        down = cli_stack(state)["doc"]
        assert down["error"] == "not running" and down["last_state"] == "streaming"
        assert metrics(url)["doc"][("quarry_cdc_up", None)] == 0
        assert cli_cdc(state)["doc"]["reason"].endswith("the follower is not running")
    finally:
        run_quarry(state, "down", check=False)


def _curations_see_the_lag(state: Path, stopped_at: float) -> None:
    """The follower is paused: the warehouse falls behind while the source's clock runs."""
    time.sleep(max(0.0, stopped_at + 3.0 - time.monotonic()))
    sql = {"sql": "SELECT * FROM episodes", "allow_empty": True}  # the stack has no episode
    with service(state, CurationConfig(max_lag_s=2.0)) as refusing:
        refused = refusing.post("/v1/curations", json=sql)
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"] == PROBLEM
        problem = refused.json()
        assert problem["reason"] == "warehouse_lag" and problem["max_lag_s"] == 2.0
        assert problem["warehouse_lag_s"] > 3.0 and "curation.max_lag_s" in problem["detail"]
    with service(state, CurationConfig(max_lag_s=2.0, on_lag="warn")) as warning:
        built = warning.post("/v1/curations", json=sql)
        assert built.status_code == 201, built.text
        body = built.json()
        assert body["warehouse_lag_s"] > 3.0 and body["lag_warning"].startswith("snapshot ")
        assert built.headers["quarry-lag-warning"] == body["lag_warning"]
    with service(state, CurationConfig()) as unbounded:
        plain = unbounded.post("/v1/curations", json=sql)
        assert plain.status_code == 201, plain.text
        assert plain.json()["warehouse_lag_s"] > 3.0 and plain.json()["lag_warning"] is None
        assert "quarry-lag-warning" not in plain.headers
