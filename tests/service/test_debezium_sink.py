"""Debezium Server as a real source: events shaped as its PostgreSQL connector and its HTTP sink
send them (key-only ``before`` with fallback values, CloudEvents, transaction metadata), and
the sink's authentication (Standard Webhooks signatures, JWTs from the token endpoint), posted
to the service under uvicorn over a real DuckLake warehouse and a real Postgres."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook

from quarry.settings import Settings
from service.settings import ServiceConfig
from service.tokens import Scope, create_token
from tests.service.test_debezium import CONNECTOR, UNAVAILABLE, envelope, episode, source
from warehouse.ducklake.backend import DuckLakeWarehouse

PROBLEM = "application/problem+json"
SECRET = "whsec_" + base64.b64encode(b"debezium-sink-secret-32-bytes!!!").decode()
JWT_SECRET = "a-jwt-key-of-at-least-thirty-two-characters"
EPOCH = "1970-01-01T00:00:00Z"  # Debezium's NOT NULL timestamptz fallback


class Sink:
    """The service, its tokens and its lake."""

    def __init__(self, url: str, tokens: dict[str, str], dsn: str, lake: DuckLakeWarehouse):
        self.url, self.tokens, self.dsn, self.lake = url, tokens, dsn, lake

    def post(self, body: Any, **headers: str) -> httpx.Response:
        return httpx.post(
            f"{self.url}/v1/cdc/debezium",
            content=body if isinstance(body, bytes) else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **headers},
            timeout=60,
        )

    def admin(self, body: Any) -> httpx.Response:
        return self.post(body, Authorization=f"Bearer {self.tokens['admin']}")

    def rows(self, sql: str) -> list[dict[str, Any]]:
        return list(self.lake.query_arrow(sql).to_pylist())


@pytest.fixture(scope="module")
def sink(postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sink]:
    from tests.fixtures.postgres import create_database
    from tests.fixtures.serving import served
    from tests.fixtures.warehouse import new_warehouse_config

    dsn = create_database(postgres, "debezium_sink")
    config = new_warehouse_config(postgres, tmp_path_factory.mktemp("debezium-sink"))
    with DuckLakeWarehouse(config) as warehouse:
        warehouse.bootstrap()
    with psycopg.connect(dsn, autocommit=True) as conn:
        tokens = {
            "admin": create_token(conn, "debezium", [Scope.ADMIN]),
            "reader": create_token(conn, "notebook", [Scope.READ]),
            "doomed": create_token(conn, "doomed", [Scope.ADMIN]),
        }
    service = ServiceConfig(
        webhook_secret=SecretStr(SECRET), jwt_secret=SecretStr(JWT_SECRET), token_cache_s=0
    )
    settings = Settings(
        state_dir=Path(tmp_path_factory.mktemp("state")),
        source_dsn=SecretStr(dsn),
        warehouse=config,
        service=service,
        cdc={"source": "debezium"},
    )
    from service.app import create_app

    with served(create_app(settings.service_settings())) as url, DuckLakeWarehouse(config) as lake:
        yield Sink(url, tokens, dsn, lake)


# -- events as Debezium's PostgreSQL connector writes them ---------------------------------------


def fallback_episode(episode_id: str) -> dict[str, Any]:
    """A deleted episode's ``before`` under REPLICA IDENTITY DEFAULT: the key, and for every
    other NOT NULL column its schema default or Debezium's fallback (``""`` for text, uuid and
    jsonb, ``0``, ``false``, the epoch), as ``JdbcValueConverters.convertValue`` fills them."""
    return {
        **dict.fromkeys(("robot_id", "task_id", "site", "operator", "uri", "sha256"), ""),
        **dict.fromkeys(("robot_sw_version", "topics"), ""),
        "id": episode_id,
        "started_at": EPOCH,
        "ended_at": EPOCH,
        **dict.fromkeys(("start_ns", "end_ns", "steps", "size_bytes"), 0),
        **dict.fromkeys(("schema_version", "pipeline_version"), 0),
        "control_hz": 0.0,
        "success": False,
        "status": "active",  # DEFAULT 'active' is propagated as the schema default
        "qc_report": "{}",
        "created_at": EPOCH,
        "updated_at": EPOCH,
    }


def children(episode_id: str, label_id: int) -> list[tuple[str, dict[str, Any]]]:
    flag = {"episode_id": episode_id, "flag": "camera_blackout", "detail": '{"frames": 3}'}
    label = {
        "id": label_id,
        "episode_id": episode_id,
        "key": "scene",
        "value": "kitchen",
        "start_ns": None,
        "end_ns": None,
        "author": "ann",
        "created_at": "2024-05-01T12:03:00Z",
    }
    stat = {"episode_id": episode_id, "field": "state", "dim": 0, "count": 600}
    stat.update({"sum": 1.5, "sum_sq": 2.5, "min": -1.0, "max": 1.0})
    return [("episode_quality_flags", flag), ("episode_labels", label), ("episode_stats", stat)]


def fallback_children(episode_id: str, label_id: int) -> list[tuple[str, dict[str, Any]]]:
    """The children's key-only ``before`` of the cascaded deletes, with fallbacks."""
    flag = {"episode_id": episode_id, "flag": "camera_blackout", "detail": "{}"}
    label = {"id": label_id, "episode_id": "", "key": "", "value": "", "start_ns": None}
    label.update({"end_ns": None, "author": "", "created_at": EPOCH})
    stat = {"episode_id": episode_id, "field": "state", "dim": 0, "count": 0}
    stat.update({"sum": 0.0, "sum_sq": 0.0, "min": 0.0, "max": 0.0})
    return [("episode_quality_flags", flag), ("episode_labels", label), ("episode_stats", stat)]


def seed(sink: Sink, episode_id: str, label_id: int, lsn: int) -> None:
    events = [
        envelope("c", "robots", lsn, after={"id": "r-ep", "model": "arm", "site": "lab"}),
        envelope("c", "tasks", lsn + 1, after={"id": "t1", "description": ""}),
        envelope("c", "episodes", lsn + 2, after=episode(episode_id)),
    ]
    for offset, (table, row) in enumerate(children(episode_id, label_id), start=3):
        events.append(envelope("c", table, lsn + offset, after=row))
    response = sink.admin(events)
    assert response.status_code == 200, response.text


def counts(sink: Sink, episode_id: str) -> dict[str, int]:
    tables = ("episodes", "episode_quality_flags", "episode_labels", "episode_stats")
    out = {}
    for table in tables:
        column = "id" if table == "episodes" else "episode_id"
        rows = sink.rows(f"SELECT count(*) AS n FROM {table} WHERE {column} = '{episode_id}'")
        out[table] = int(rows[0]["n"])
    return out


# -- tests ---------------------------------------------------------------------------------------


def test_delete_of_an_episode_and_its_cascaded_children_reads_only_the_keys(sink: Sink) -> None:
    doomed, kept = str(uuid.uuid4()), str(uuid.uuid4())
    seed(sink, doomed, 9001, 10_000)
    seed(sink, kept, 9002, 10_100)
    assert counts(sink, doomed) == dict.fromkeys(counts(sink, doomed), 1)
    # DELETE FROM episodes: the parent's delete, then ON DELETE CASCADE's, each followed by
    # its tombstone, as one batch of Debezium Server's HTTP sink
    batch: list[Any] = [envelope("d", "episodes", 10_200, before=fallback_episode(doomed)), None]
    for offset, (table, before) in enumerate(fallback_children(doomed, 9001), start=1):
        batch += [envelope("d", table, 10_200 + offset, before=before), None]
    response = sink.admin(batch)
    assert response.status_code == 200, response.text
    assert response.json()["applied"] == 4 and response.json()["tombstones"] == 4
    assert counts(sink, doomed) == dict.fromkeys(counts(sink, doomed), 0)
    assert counts(sink, kept) == dict.fromkeys(counts(sink, kept), 1)
    # re-delivered, the deletes change nothing, and the fallbacks were never written
    assert sink.admin(batch).status_code == 200
    label = sink.rows("SELECT episode_id, author FROM episode_labels WHERE id = 9002")
    assert label == [{"episode_id": kept, "author": "ann"}]


def test_a_delete_still_needs_its_key(sink: Sink) -> None:
    before = fallback_episode(str(uuid.uuid4()))
    before["id"] = None
    response = sink.admin(envelope("d", "episodes", 10_300, before=before))
    assert response.status_code == 422 and response.json()["field"] == "before.id"


def cloud_event(event: dict[str, Any], *, schemas: bool = False) -> dict[str, Any]:
    """``event`` as Debezium's CloudEventsConverter writes it in structured JSON mode: the
    ``source`` block and ``op`` as ``iodebezium*`` attributes (int64s as strings), ``data``
    holding only ``before`` and ``after``."""
    src = event["source"]
    attributes = {
        "id": f"name:{src['name']};lsn:{src['lsn']};txId:{src['txId']}",
        "source": f"/debezium/postgresql/{src['name']}",
        "specversion": "1.0",
        "type": "io.debezium.connector.postgresql.DataChangeEvent",
        "time": "2024-05-01T12:04:00.000Z",
        "datacontenttype": "application/json",
        "iodebeziumop": event["op"],
        "iodebeziumversion": src["version"],
        "iodebeziumconnector": "postgresql",
        "iodebeziumname": src["name"],
        "iodebeziumtsms": str(src["ts_ms"]),
        "iodebeziumsnapshot": src["snapshot"],
        "iodebeziumdb": src["db"],
        "iodebeziumsequence": src["sequence"],
        "iodebeziumschema": src["schema"],
        "iodebeziumtable": src["table"],
        "iodebeziumtxId": str(src["txId"]),
        "iodebeziumlsn": str(src["lsn"]),
        "iodebeziumxmin": None,
        "iodebeziumtxid": f"{src['txId']}:{src['lsn']}",
        "iodebeziumtxtotalorder": "1",
        "iodebeziumtxdatacollectionorder": "1",
    }
    data = {"before": event["before"], "after": event["after"]}
    if schemas:
        data = {"schema": {"type": "struct", "fields": [], "optional": False}, "payload": data}
    return {**attributes, "data": data}


def test_cloud_events_with_an_unchanged_toast_placeholder(sink: Sink) -> None:
    episode_id = str(uuid.uuid4())
    seed(sink, episode_id, 9003, 11_000)
    # UPDATE episodes SET steps = 601: the TOASTed qc_report and topics are not in the WAL
    update = envelope(
        "u",
        "episodes",
        11_100,
        after=episode(episode_id, steps=601, qc_report=UNAVAILABLE, topics=UNAVAILABLE),
    )
    moved = envelope("u", "episodes", 11_200, after=episode(episode_id, steps=601))
    moved["after"].update(site="lab-2", qc_report=UNAVAILABLE, topics=UNAVAILABLE)
    response = sink.post(
        json.dumps(cloud_event(update)).encode(),
        Authorization=f"Bearer {sink.tokens['admin']}",
        **{"Content-Type": "application/cloudevents+json"},
    )
    assert response.status_code == 200, response.text
    assert sink.admin([cloud_event(moved, schemas=True)]).status_code == 200
    rows = sink.rows(
        f"SELECT steps, site, qc_report, topics FROM episodes WHERE id = '{episode_id}'"
    )
    assert len(rows) == 1 and rows[0]["steps"] == 601 and rows[0]["site"] == "lab-2"
    assert json.loads(rows[0]["qc_report"]) == {"blur": 0.1}
    assert json.loads(rows[0]["topics"]) == [{"topic": "/cam", "rate_hz": 30}]
    bad = cloud_event(update)
    bad["iodebeziumlsn"] = "not-a-number"
    refused = sink.admin(bad)
    assert refused.status_code == 422 and refused.json()["field"] == "iodebeziumlsn"
    avro = {**cloud_event(update), "datacontenttype": "application/avro", "data": "AAAAAAEC"}
    assert sink.admin(avro).status_code == 422


def test_transaction_metadata_heartbeats_and_messages_are_skipped(sink: Sink) -> None:
    begin = {"status": "BEGIN", "id": "571:12000", "ts_ms": 1486500577125}
    begin.update({"event_count": None, "data_collections": None})
    change = envelope("c", "robots", 12_000, after={"id": "tx-robot", "model": "arm", "site": "x"})
    change["transaction"] = {"id": "571:12000", "total_order": "1", "data_collection_order": "1"}
    end = {"status": "END", "id": "571:12000", "ts_ms": 1486500577691, "event_count": 1}
    end["data_collections"] = [{"data_collection": "public.robots", "event_count": 1}]
    message = {"op": "m", "ts_ms": 1, "source": source("", 12_001)}
    message["message"] = {"prefix": "quarry", "content": "aGk="}
    heartbeat = {"ts_ms": 1486500577691}
    response = sink.admin([begin, change, end, message, heartbeat])
    assert response.status_code == 200, response.text
    assert response.json()["applied"] == 1 and response.json()["skipped"] == 4
    wrapped_end = {"schema": {"type": "struct", "fields": []}, "payload": end}
    assert sink.admin(wrapped_end).json()["skipped"] == 1
    assert sink.rows("SELECT id FROM robots WHERE id = 'tx-robot'") == [{"id": "tx-robot"}]


def signed(body: bytes, *, secret: str = SECRET, at: datetime | None = None) -> dict[str, str]:
    """The headers Debezium's StandardWebhooksAuthenticator sets."""
    msg_id = f"msg_{uuid.uuid4()}"
    when = at or datetime.now(tz=UTC)
    signature = Webhook(secret).sign(msg_id, when, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
    }


def test_standard_webhooks_signatures(sink: Sink) -> None:
    body = json.dumps(envelope("c", "robots", 13_000, after={"id": "signed", "model": "a"}))
    raw = body.encode()
    ok = sink.post(raw, **signed(raw))
    assert ok.status_code == 200, ok.text
    assert sink.rows("SELECT model FROM robots WHERE id = 'signed'") == [{"model": "a"}]
    other = "whsec_" + base64.b64encode(b"another-secret-of-32-bytes-long!").decode()
    tampered = json.dumps(envelope("c", "robots", 13_001, after={"id": "signed", "model": "b"}))
    old = datetime.now(tz=UTC) - timedelta(minutes=10)
    for headers, content in (
        (signed(raw, secret=other), raw),  # signed with another secret
        (signed(raw), tampered.encode()),  # the body changed after signing
        (signed(raw, at=old), raw),  # a replay from 10 minutes ago
        ({k: v for k, v in signed(raw).items() if k != "webhook-id"}, raw),  # a header missing
    ):
        refused = sink.post(content, **headers)
        assert refused.status_code == 401, refused.text
        assert refused.headers["content-type"] == PROBLEM
        assert refused.json()["detail"].startswith("bad Standard Webhooks signature: ")
        assert "Bearer" in refused.headers["www-authenticate"]
    assert sink.rows("SELECT model FROM robots WHERE id = 'signed'") == [{"model": "a"}]
    # the signature admits the Debezium route only
    read = httpx.get(f"{sink.url}/v1/manifests", headers=signed(b""), timeout=30)
    assert read.status_code == 401


def authenticate(sink: Sink, username: str, password: str) -> httpx.Response:
    """The initial request of Debezium's JWTAuthenticator (``jwt.url`` = ``<service>/v1/``)."""
    body = {"username": username, "password": password}
    body.update({"token_expiry_in_minutes": 60, "refresh_token_expiry_in_minutes": 1440})
    return httpx.post(f"{sink.url}/v1/auth/authenticate", json=body, timeout=30)


def test_jwt_from_the_token_endpoint(sink: Sink) -> None:
    granted = authenticate(sink, "debezium", sink.tokens["admin"])
    assert granted.status_code == 200, granted.text
    grant = granted.json()
    assert grant["expires_in"] == 3_600_000 and grant["refresh_token_expires_in"] == 86_400_000
    event = envelope("c", "robots", 14_000, after={"id": "jwt", "model": "a"})
    # Debezium writes "Bearer: <jwt>", with a colon
    ok = sink.post(event, Authorization=f"Bearer: {grant['jwt']}")
    assert ok.status_code == 200, ok.text
    assert sink.post(event, Authorization=f"Bearer {grant['jwt']}").status_code == 200
    refreshed = httpx.post(
        f"{sink.url}/v1/auth/refreshToken",
        json={"jwt_refresh_token": grant["jwt_refresh_token"], "token_expiry_in_minutes": 5},
        timeout=30,
    )
    assert refreshed.status_code == 200 and refreshed.json()["expires_in"] == 300_000
    assert sink.post(event, Authorization=f"Bearer: {refreshed.json()['jwt']}").status_code == 200
    # the access token is no refresh token, a tampered JWT is refused
    as_refresh = httpx.post(
        f"{sink.url}/v1/auth/refreshToken", json={"jwt_refresh_token": grant["jwt"]}, timeout=30
    )
    assert as_refresh.status_code == 401
    assert as_refresh.json()["detail"] == "this JWT is an access token, not a refresh token"
    tampered = grant["jwt"][:-2] + ("AA" if not grant["jwt"].endswith("AA") else "BB")
    refused = sink.post(event, Authorization=f"Bearer: {tampered}")
    assert refused.status_code == 401 and refused.headers["content-type"] == PROBLEM


def test_jwt_refusals_are_clear(sink: Sink) -> None:
    for username, password in (("debezium", "qry_wrong"), ("notebook", sink.tokens["admin"])):
        refused = authenticate(sink, username, password)
        assert refused.status_code == 401, refused.text
        assert "username is the token's name" in refused.json()["detail"]
    reader = authenticate(sink, "notebook", sink.tokens["reader"]).json()["jwt"]
    event = envelope("c", "robots", 15_000, after={"id": "jwt-reader", "model": "a"})
    assert sink.post(event, Authorization=f"Bearer: {reader}").status_code == 403
    doomed = authenticate(sink, "doomed", sink.tokens["doomed"]).json()
    with psycopg.connect(sink.dsn, autocommit=True) as conn:
        conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE name = 'doomed'")
    revoked = sink.post(event, Authorization=f"Bearer: {doomed['jwt']}")
    assert revoked.status_code == 401, revoked.text
    again = httpx.post(
        f"{sink.url}/v1/auth/refreshToken",
        json={"jwt_refresh_token": doomed["jwt_refresh_token"]},
        timeout=30,
    )
    assert again.status_code == 401
    assert sink.rows("SELECT id FROM robots WHERE id = 'jwt-reader'") == []


def test_readiness_names_the_source(sink: Sink) -> None:
    checks = httpx.get(f"{sink.url}/readyz", timeout=30).json()["checks"]
    assert checks["cdc"]["source"] == "debezium"
    assert checks["cdc"]["slot"] == f"debezium:{CONNECTOR}"


# -- a Debezium-fed warehouse mirrors real Postgres changes row for row ----------------------------

_FALLBACKS = {"integer": 0, "bigint": 0, "double precision": 0.0, "boolean": False}


def key_only_before(conn: psycopg.Connection[Any], table: str, row: dict[str, Any]) -> Any:
    """The ``before`` Debezium sends for a delete of ``row`` under REPLICA IDENTITY DEFAULT:
    the primary key's values, every other column NULL when nullable, else its fallback."""
    key = {
        r[0]
        for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
            (table,),
        )
    }
    columns = conn.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    before: dict[str, Any] = {}
    for name, data_type, nullable in columns:
        if name in key:
            before[name] = row[name]
        elif nullable == "YES":
            before[name] = None
        elif data_type.startswith("timestamp"):
            before[name] = EPOCH
        else:
            before[name] = _FALLBACKS.get(data_type, "")
    return before


class Source:
    """Real changes on the service's operational database, each turned into the event
    Debezium's connector would emit for it, versioned by the WAL position after it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn, self.events = conn, []  # type: list[dict[str, Any]]

    def lsn(self) -> int:
        row = self.conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchone()
        assert row is not None
        return int(row[0]) + len(self.events)

    def write(self, op: str, table: str, sql: str, *params: Any) -> list[dict[str, Any]]:
        rows = [r[0] for r in self.conn.execute(sql + f" RETURNING to_jsonb({table})", params)]
        for row in rows:
            if op == "d":
                before = key_only_before(self.conn, table, row)
                self.events.append(envelope("d", table, self.lsn(), before=before))
                self.events.append(None)  # its tombstone
            else:
                self.events.append(envelope(op, table, self.lsn(), after=row))
        return rows


def mirrored(sink: Sink, ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's rows of the episodes ``ids``, in the warehouse and in Postgres."""
    quoted = ", ".join(f"'{i}'" for i in ids)
    queries = {
        "episodes": f"SELECT id::text, steps, site FROM episodes WHERE id IN ({quoted})",
        "episode_quality_flags": "SELECT episode_id::text, flag FROM episode_quality_flags "
        f"WHERE episode_id IN ({quoted})",
        "episode_labels": "SELECT id, episode_id::text, value FROM episode_labels "
        f"WHERE episode_id IN ({quoted})",
        "episode_stats": "SELECT episode_id::text, field, dim, count FROM episode_stats "
        f"WHERE episode_id IN ({quoted})",
    }
    out = {}
    with psycopg.connect(sink.dsn) as conn:
        for table, sql in queries.items():
            lake = sorted(tuple(r.values()) for r in sink.rows(sql))
            source = sorted(tuple(r) for r in conn.execute(sql))
            out[table] = lake
            assert lake == source, table
    return out


_SEED = (
    (
        "episode_quality_flags",
        "INSERT INTO episode_quality_flags (episode_id, flag) VALUES (%s, 'blur')",
    ),
    ("episode_labels", "INSERT INTO episode_labels (episode_id, key, value) VALUES (%s, 's', 'k')"),
    ("episode_stats", "INSERT INTO episode_stats VALUES (%s, 'state', 0, 600, 1, 2, -1, 1)"),
    ("episode_stats", "INSERT INTO episode_stats VALUES (%s, 'state', 1, 600, 1, 2, -1, 1)"),
)
_CHANGES = (
    ("u", "episodes", "UPDATE episodes SET steps = steps + 1, site = 'lab-2' WHERE id = %s"),
    ("u", "episode_labels", "UPDATE episode_labels SET value = 'garage' WHERE episode_id = %s"),
    ("d", "episode_stats", "DELETE FROM episode_stats WHERE episode_id = %s AND dim = 1"),
)
_CHILDREN = ("episode_quality_flags", "episode_labels", "episode_stats")


def seed_source(source: Source, episode_ids: list[str]) -> None:
    upsert = "ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id"
    source.write(
        "c", "robots", f"INSERT INTO robots (id, model, site) VALUES ('rr', 'a', 'l') {upsert}"
    )
    source.write("c", "tasks", f"INSERT INTO tasks (id) VALUES ('tr') {upsert}")
    for episode_id in episode_ids:
        row = episode(episode_id, robot_id="rr", task_id="tr")
        marks = ", ".join(["%s"] * len(row))
        insert = f"INSERT INTO episodes ({', '.join(row)}) VALUES ({marks})"
        source.write("c", "episodes", insert, *row.values())
        for table, sql in _SEED:
            source.write("c", table, sql, episode_id)


def cascade_delete(source: Source, episode_id: str) -> None:
    """DELETE FROM episodes: the parent's event, then those of the rows ON DELETE CASCADE
    removes, in WAL order, each followed by its tombstone."""
    children = [
        (table, row)
        for table in _CHILDREN
        for (row,) in source.conn.execute(
            f"SELECT to_jsonb({table}) FROM {table} WHERE episode_id = %s", (episode_id,)
        )
    ]
    source.write("d", "episodes", "DELETE FROM episodes WHERE id = %s", episode_id)
    for table, row in children:
        before = key_only_before(source.conn, table, row)
        source.events += [envelope("d", table, source.lsn(), before=before), None]


def test_real_inserts_updates_and_cascaded_deletes_mirror_row_for_row(sink: Sink) -> None:
    kept, dropped = str(uuid.uuid4()), str(uuid.uuid4())
    with psycopg.connect(sink.dsn, autocommit=True) as conn:
        source = Source(conn)
        seed_source(source, [kept, dropped])
        for op, table, sql in _CHANGES:
            source.write(op, table, sql, kept)
        cascade_delete(source, dropped)
    # one event per request, as Debezium Server's sink posts them (it skips the tombstones)
    for event in filter(None, source.events):
        raw = json.dumps(event).encode()
        response = sink.post(raw, **signed(raw))
        assert response.status_code == 200, response.text
    tables = mirrored(sink, [kept, dropped])
    assert [r[1:] for r in tables["episodes"]] == [(601, "lab-2")]
    assert [r[2] for r in tables["episode_labels"]] == ["garage"]
    assert [r[2] for r in tables["episode_stats"]] == [0]
    assert all(kept in r for rows in tables.values() for r in rows)
