"""``POST /v1/cdc/debezium``: change events shaped as Debezium's PostgreSQL connector documents
them, posted over HTTP to the service under uvicorn, applied to a real DuckLake warehouse."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pydantic import SecretStr

from quarry.settings import Settings
from service.api.routes import cdc as cdc_routes
from service.app import create_app
from service.tokens import Scope, create_token
from warehouse.config import WarehouseConfig
from warehouse.ducklake.backend import DuckLakeWarehouse

PROBLEM = "application/problem+json"
CONNECTOR = "PostgreSQL_server"
UNAVAILABLE = "__debezium_unavailable_value"


@pytest.fixture(scope="module")
def service(
    postgres: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str], WarehouseConfig]]:
    """The service under uvicorn on a loopback port over a lake of its own; an admin and a
    read-only token."""
    from tests.fixtures.postgres import create_database
    from tests.fixtures.serving import served
    from tests.fixtures.warehouse import new_warehouse_config

    dsn = create_database(postgres, "debezium_service")
    lake = new_warehouse_config(postgres, tmp_path_factory.mktemp("debezium"))
    with DuckLakeWarehouse(lake) as warehouse:
        warehouse.bootstrap()
    with psycopg.connect(dsn, autocommit=True) as conn:
        tokens = {
            "admin": create_token(conn, "debezium", [Scope.ADMIN]),
            "reader": create_token(conn, "notebook", [Scope.READ]),
        }
    settings = Settings(
        state_dir=Path(tmp_path_factory.mktemp("state")),
        source_dsn=SecretStr(dsn),
        warehouse=lake,
    )
    app = create_app(settings.service_settings())
    if not any(getattr(r, "path", "") == "/v1/cdc/debezium" for r in app.routes):
        app.include_router(cdc_routes.router)  # until service/app.py registers it
    with served(app) as url:
        yield url, tokens, lake


@pytest.fixture(scope="module")
def api(service: tuple[str, dict[str, str], WarehouseConfig]) -> Iterator[httpx.Client]:
    url, tokens, _ = service
    headers = {"Authorization": f"Bearer {tokens['admin']}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def lake(service: tuple[str, dict[str, str], WarehouseConfig]) -> Iterator[DuckLakeWarehouse]:
    with DuckLakeWarehouse(service[2]) as warehouse:
        yield warehouse


# -- events as the Debezium PostgreSQL connector writes them (JSON converter) -------------------


def source(table: str, lsn: int, *, tx: int = 555, snapshot: str = "false") -> dict[str, Any]:
    return {
        "version": "2.7.0.Final",
        "connector": "postgresql",
        "name": CONNECTOR,
        "ts_ms": 1559033904863,
        "snapshot": snapshot,
        "db": "quarry",
        "sequence": json.dumps([str(lsn - 9), str(lsn)]),
        "schema": "public",
        "table": table,
        "txId": tx,
        "lsn": lsn,
        "xmin": None,
    }


def envelope(
    op: str,
    table: str,
    lsn: int,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The value payload of a change event (``value.converter.schemas.enable=false``)."""
    return {
        "before": before,
        "after": after,
        "source": source(table, lsn),
        "op": op,
        "ts_ms": 1559033904961,
        "transaction": None,
    }


def robot_schema() -> dict[str, Any]:
    """The value schema Debezium sends with ``schemas.enable=true`` for ``public.robots``."""
    row = {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "id"},
            {"type": "string", "optional": False, "field": "model"},
            {"type": "string", "optional": False, "field": "site"},
            {
                "type": "string",
                "optional": False,
                "name": "io.debezium.time.ZonedTimestamp",
                "version": 1,
                "field": "created_at",
            },
        ],
        "optional": True,
        "name": f"{CONNECTOR}.public.robots.Value",
    }
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "fields": [],
                "optional": False,
                "name": "io.debezium.connector.postgresql.Source",
                "field": "source",
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": f"{CONNECTOR}.public.robots.Envelope",
    }


def robot(robot_id: str, model: str = "arm") -> dict[str, Any]:
    return {"id": robot_id, "model": model, "site": "lab", "created_at": "2024-05-01T12:00:00Z"}


def episode(episode_id: str, steps: int = 600, **overrides: Any) -> dict[str, Any]:
    row = {
        "id": episode_id,
        "robot_id": "r-ep",
        "task_id": "t1",
        "site": "lab",
        "operator": "ann",
        "started_at": "2024-05-01T12:00:00.123456Z",
        "ended_at": "2024-05-01T12:01:00Z",
        "start_ns": 0,
        "end_ns": 60_000_000_000,
        "steps": steps,
        "control_hz": 10.0,
        "success": True,
        "uri": f"objects/{episode_id}.mcap",
        "size_bytes": 1234,
        "sha256": "ab" * 32,
        "topics": '[{"topic": "/cam", "rate_hz": 30}]',
        "status": "active",
        "schema_version": 1,
        "pipeline_version": 1,
        "robot_sw_version": "1.0",
        "qc_report": '{"blur": 0.1}',
        "created_at": "2024-05-01T12:02:00Z",
        "updated_at": "2024-05-01T12:02:00Z",
    }
    row.update(overrides)
    return row


def robots(lake: DuckLakeWarehouse, prefix: str) -> list[tuple[str, str]]:
    rows = lake.query_arrow(
        f"SELECT id, model FROM robots WHERE id LIKE '{prefix}%' ORDER BY id"
    ).to_pylist()
    return [(r["id"], r["model"]) for r in rows]


# -- tests ---------------------------------------------------------------------------------------


def test_create_update_delete_with_tombstone_converge_under_redelivery(
    api: httpx.Client, lake: DuckLakeWarehouse
) -> None:
    wrapped = {
        "schema": robot_schema(),
        "payload": envelope("c", "robots", 1000, after=robot("a-1")),
    }
    events: list[Any] = [
        wrapped,
        envelope("c", "robots", 1010, after=robot("a-2")),
        envelope("u", "robots", 1020, after=robot("a-1", "gripper")),
        envelope("d", "robots", 1030, before={"id": "a-2", "model": None, "site": None}),
        None,  # the tombstone Debezium writes after a delete, for log compaction
    ]
    response = api.post("/v1/cdc/debezium", json=events)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["applied"] == 4 and body["tombstones"] == 1 and body["snapshot_id"] > 0
    assert robots(lake, "a-") == [("a-1", "gripper")]
    # at-least-once: the whole batch again, then each event alone, in reverse order
    assert api.post("/v1/cdc/debezium", json=events).status_code == 200
    for event in reversed(events):
        assert api.post("/v1/cdc/debezium", json=event).status_code == 200
    assert robots(lake, "a-") == [("a-1", "gripper")]
    position = lake.position()
    assert position is not None and position.slot == f"debezium:{CONNECTOR}"
    assert position.commit_lsn == 1030


def test_snapshot_reads_truncate_and_messages(api: httpx.Client, lake: DuckLakeWarehouse) -> None:
    read = envelope(
        "r", "tasks", 2000, after={"id": "tk", "description": "pick", "created_at": None}
    )
    read["source"]["snapshot"] = "last"
    message = {"source": source("", 2005), "op": "m", "message": {"prefix": "x", "content": ""}}
    truncate = {"source": source("tasks", 2010), "op": "t", "ts_ms": 1559033904961}
    after = envelope("c", "tasks", 2020, after={"id": "tk2", "description": "", "created_at": None})
    response = api.post("/v1/cdc/debezium", json=[read, message, truncate, after])
    assert response.status_code == 200, response.text
    assert response.json()["skipped"] == 1
    tasks = lake.query_arrow("SELECT id FROM tasks WHERE id LIKE 'tk%' ORDER BY id").to_pylist()
    assert tasks == [{"id": "tk2"}]
    # a read re-delivered after the truncate does not bring the row back
    assert api.post("/v1/cdc/debezium", json=read).status_code == 200
    assert lake.query_arrow("SELECT count(*) AS n FROM tasks WHERE id = 'tk'").to_pylist() == [
        {"n": 0}
    ]


def test_episode_values_and_unavailable_toast_placeholder(
    api: httpx.Client, lake: DuckLakeWarehouse
) -> None:
    episode_id = "6f1c7d2e-8a41-4b57-9a35-2b0c1e7d9f10"
    create = envelope("c", "episodes", 3000, after=episode(episode_id))
    # an update that did not touch the TOASTed qc_report: Debezium sends its placeholder
    update = envelope(
        "u", "episodes", 3010, after=episode(episode_id, steps=601, qc_report=UNAVAILABLE)
    )
    cloud_event = {
        "id": "name:PostgreSQL_server;lsn:3010",
        "source": "/debezium/postgresql/PostgreSQL_server",
        "specversion": "1.0",
        "type": "io.debezium.connector.postgresql.DataChangeEvent",
        "datacontenttype": "application/json",
        "data": update,
    }
    assert api.post("/v1/cdc/debezium", json=create).status_code == 200
    response = api.post(
        "/v1/cdc/debezium",
        content=json.dumps(cloud_event),
        headers={"Content-Type": "application/cloudevents+json"},
    )
    assert response.status_code == 200, response.text
    rows = lake.query_arrow(
        f"SELECT id, steps, qc_report, started_at, topics, success FROM episodes "
        f"WHERE id = '{episode_id}'"
    ).to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert row["steps"] == 601 and json.loads(row["qc_report"]) == {"blur": 0.1}
    assert row["started_at"].isoformat() == "2024-05-01T12:00:00.123456+00:00"
    assert json.loads(row["topics"]) == [{"topic": "/cam", "rate_hz": 30}] and row["success"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda e: e["after"].update(model=7), "after.model"),
        (lambda e: e["source"].pop("lsn"), "source.lsn"),
        (lambda e: e["source"].update(table="nope"), "source.table"),
        (lambda e: e["after"].update(colour="red"), "after.colour"),
        (lambda e: e.update(op="x"), "op"),
        (lambda e: e["after"].pop("id"), "after.id"),
    ],
)
def test_malformed_event_is_a_422_naming_index_and_field_and_applies_nothing(
    api: httpx.Client, lake: DuckLakeWarehouse, mutate: Any, field: str
) -> None:
    good = envelope("c", "robots", 4000, after=robot("bad-batch-1"))
    bad = copy.deepcopy(envelope("c", "robots", 4001, after=robot("bad-batch-2")))
    mutate(bad)
    response = api.post("/v1/cdc/debezium", json=[good, bad])
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["index"] == 1 and problem["field"] == field
    assert robots(lake, "bad-batch") == []  # the good event of the request was not applied


def test_bad_body_auth_and_a_second_source_are_refused(
    api: httpx.Client, service: tuple[str, dict[str, str], WarehouseConfig]
) -> None:
    not_json = api.post(
        "/v1/cdc/debezium", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400 and not_json.headers["content-type"] == PROBLEM
    url, tokens, _ = service
    event = envelope("c", "robots", 5000, after=robot("auth"))
    assert httpx.post(f"{url}/v1/cdc/debezium", json=event).status_code == 401
    reader = {"Authorization": f"Bearer {tokens['reader']}"}
    assert httpx.post(f"{url}/v1/cdc/debezium", json=event, headers=reader).status_code == 403
    other = copy.deepcopy(event)
    other["source"]["name"] = "another_connector"
    conflict = api.post("/v1/cdc/debezium", json=other)
    assert conflict.status_code == 409 and conflict.headers["content-type"] == PROBLEM
