"""A Debezium-fed warehouse is judged like a follower-fed one: `/readyz`, `/metrics` and
`quarry cdc status --json` read the connector's reports in Postgres (the endpoint writes them
when it applies events) and say streaming while events advance the position, stalled within
10 s once they stop, with the last refused request's error; a curation carries the lag of
the events' source commit times and is refused past `curation.max_lag_s`."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from curation.config import CurationConfig
from quarry.settings import Settings
from quarry.stack.postgres import EmbeddedPostgres
from service.app import create_app
from service.settings import ServiceConfig
from service.tokens import Scope, create_token
from tests.cdc.conftest import current_lsn
from tests.fixtures.postgres import create_database
from tests.fixtures.serving import served
from tests.fixtures.stack import QUARRY
from tests.fixtures.warehouse import new_warehouse_config
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse

CONNECTOR = "fleet_db"
INTERVAL_S = 1.0
MAX_LAG_S = 600.0
WITHIN_S = 10.0
_databases = itertools.count()


@dataclass
class Fed:
    api: httpx.Client
    dsn: str
    lake: DuckLakeConfig
    state: Path


@pytest.fixture
def fed(postgres: EmbeddedPostgres, tmp_path: Path) -> Iterator[Fed]:
    """The service over a lake of its own that only Debezium feeds; Debezium is expected to
    post at least every second; curations are bounded to 10 minutes of lag."""
    dsn = create_database(postgres, f"debezium_liveness_{next(_databases)}")
    lake = new_warehouse_config(postgres, tmp_path)
    assert isinstance(lake, DuckLakeConfig)
    with DuckLakeWarehouse(lake) as warehouse:
        warehouse.bootstrap()
    with psycopg.connect(dsn, autocommit=True) as conn:
        token = create_token(conn, "debezium", [Scope.ADMIN])
    settings = Settings(
        state_dir=tmp_path / "state",
        source_dsn=SecretStr(dsn),
        warehouse=lake,
        service=ServiceConfig(debezium_interval_s=INTERVAL_S),
        curation=CurationConfig(max_lag_s=MAX_LAG_S),
    )
    with (
        served(create_app(settings.service_settings())) as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as api,
    ):
        yield Fed(api, dsn, lake, tmp_path / "cli-state")


def robot_event(robot_id: str, lsn: int, ts_ms: int) -> dict[str, Any]:
    return {
        "before": None,
        "after": {"id": robot_id, "model": "arm", "site": "lab"},
        "source": {"name": CONNECTOR, "schema": "public", "table": "robots", "lsn": lsn,
                   "ts_ms": ts_ms, "txId": 7},
        "op": "c",
        "ts_ms": ts_ms,
    }  # fmt: skip


def post(fed: Fed, robot_id: str, *, age_s: float = 0.0) -> None:
    """One change event, committed ``age_s`` seconds ago, at the source's current WAL."""
    with psycopg.connect(fed.dsn, autocommit=True) as conn:
        lsn = current_lsn(conn)
    event = robot_event(robot_id, lsn, int((time.time() - age_s) * 1000))
    response = fed.api.post("/v1/cdc/debezium", json=event)
    assert response.status_code == 200, response.text


@contextmanager
def feeding(fed: Fed, every_s: float = INTERVAL_S / 4) -> Iterator[None]:
    """Debezium posting a change every ``every_s`` seconds until the block ends (the first
    one before it starts)."""
    stop = threading.Event()
    count = itertools.count()
    post(fed, "r-feed-start")

    def run() -> None:
        with httpx.Client(base_url=str(fed.api.base_url), headers=fed.api.headers) as api:
            while not stop.wait(every_s):
                post(replace(fed, api=api), f"r-feed-{next(count)}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


def readyz(fed: Fed) -> dict[str, Any]:
    body = fed.api.get("/readyz").json()
    assert body["ready"] and body["checks"]["postgres"]["ok"]
    cdc: dict[str, Any] = body["checks"]["cdc"]
    return cdc


def metrics_state(fed: Fed) -> tuple[str, float]:
    samples = [
        s
        for family in text_string_to_metric_families(fed.api.get("/metrics").text)
        for s in family.samples
    ]
    state = next(s.labels["state"] for s in samples if s.name == "quarry_cdc_state" and s.value)
    up = next(s.value for s in samples if s.name == "quarry_cdc_up")
    return state, up


def cli_status(fed: Fed) -> tuple[int, dict[str, Any]]:
    """``quarry cdc status --json`` with the service's source and warehouse settings."""
    assert fed.lake.catalog_dsn is not None
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")},
        "QUARRY_SOURCE_DSN": fed.dsn,
        "QUARRY_WAREHOUSE__CATALOG_DSN": fed.lake.catalog_dsn.get_secret_value(),
        "QUARRY_WAREHOUSE__DATA_PATH": str(fed.lake.data_path),
    }
    result = subprocess.run(
        [QUARRY, "cdc", "status", "--json", "--state-dir", str(fed.state)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.returncode, json.loads(result.stdout)


def test_debezium_feed_streams_then_stalls_with_its_last_error(fed: Fed) -> None:
    before = readyz(fed)
    assert before["state"] == "down" and before["ok"] is False and before["required"] is False
    assert before["reason"] == "the warehouse has no CDC position: nothing has fed it"

    with feeding(fed):
        live = readyz(fed)
        assert live["state"] == "streaming" and live["ok"] and live["kind"] == "debezium"
        assert live["slot"] == f"debezium:{CONNECTOR}" and live["connected"] is None
        assert metrics_state(fed) == ("streaming", 1.0)
        code, doc = cli_status(fed)
        assert code == 0 and doc["state"] == "streaming"
        assert doc["slot"] == f"debezium:{CONNECTOR}"

    posted_at = time.monotonic()
    while (stalled := readyz(fed))["state"] != "stalled":
        assert time.monotonic() - posted_at <= WITHIN_S, stalled
        time.sleep(0.2)
    assert stalled["reason"].startswith(("its position", "no request from Debezium"))
    assert metrics_state(fed) == ("stalled", 0.0)
    code, doc = cli_status(fed)
    assert code == 3 and doc["state"] == "stalled"

    bad = fed.api.post("/v1/cdc/debezium", json={"op": "x", "source": {}})
    assert bad.status_code == 422
    refused = readyz(fed)
    assert refused["last_error"].startswith("EventError: op must be one of")
    assert refused["errors_total"] == 1 and refused["state"] == "stalled"

    post(fed, "r-live-2")
    assert readyz(fed)["state"] == "streaming"
    assert readyz(fed)["last_error"] == refused["last_error"]  # kept until the next error


def test_curation_lag_follows_the_events_commit_times(fed: Fed) -> None:
    post(fed, "r-old", age_s=2 * MAX_LAG_S)
    # Debezium feeds robots only here: the curation is empty, which is refused unless asked
    sql = {"sql": "SELECT * FROM episodes", "allow_empty": True}
    refused = fed.api.post("/v1/curations", json=sql)
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["max_lag_s"] == MAX_LAG_S and problem["reason"] == "warehouse_lag"
    assert 2 * MAX_LAG_S <= problem["warehouse_lag_s"] < 2 * MAX_LAG_S + 60
    assert readyz(fed)["warehouse_lag_s"] >= 2 * MAX_LAG_S

    post(fed, "r-new")
    built = fed.api.post("/v1/curations", json=sql)
    assert built.status_code == 201, built.text
    assert 0 <= built.json()["warehouse_lag_s"] < 60 and built.json()["lag_warning"] is None
