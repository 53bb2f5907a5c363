"""``POST /v1/sql`` and ``GET /v1/corpus/stats`` against the live service and a small corpus."""

from __future__ import annotations

import httpx
import pyarrow as pa
import pytest

from tests.fixtures.stack import CORPUS_EPISODES

PROBLEM = "application/problem+json"
ARROW = "application/vnd.apache.arrow.stream"
# Slow on purpose: ~10^8 md5 calls over the corpus's statistics rows.
RUNAWAY = (
    "SELECT count(*) AS n FROM episode_stats a, episode_stats b, episode_stats c, "
    "episode_stats d WHERE md5(a.field || b.field || c.field || d.dim) < 'a'"
)


def sql(api: httpx.Client, query: str, **extra: object) -> httpx.Response:
    return api.post("/v1/sql", json={"sql": query, **extra})


def test_json_result_has_columns_rows_and_the_snapshot(api: httpx.Client) -> None:
    response = sql(api, "SELECT robot_id, count(*) AS n FROM episodes GROUP BY 1 ORDER BY 1")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert [c["name"] for c in body["columns"]] == ["robot_id", "n"]
    assert body["columns"][1]["type"] == "int64"
    assert sum(row[1] for row in body["rows"]) == CORPUS_EPISODES
    assert body["row_count"] == len(body["rows"])
    assert response.headers["x-quarry-snapshot-id"] == str(body["snapshot_id"])


def test_arrow_stream_when_asked_for(api: httpx.Client) -> None:
    response = api.post(
        "/v1/sql",
        json={"sql": "SELECT id, started_at, quality_flags FROM episodes ORDER BY id"},
        headers={"Accept": ARROW},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == ARROW
    table = pa.ipc.open_stream(response.content).read_all()
    assert table.num_rows == CORPUS_EPISODES
    assert pa.types.is_timestamp(table.schema.field("started_at").type)
    assert pa.types.is_list(table.schema.field("quality_flags").type)


def test_json_writes_values_json_lacks(api: httpx.Client) -> None:
    query = (
        "SELECT CAST('nan' AS DOUBLE) AS nan, CAST('-inf' AS DOUBLE) AS neg, "
        "CAST(1.25 AS DECIMAL(10, 3)) AS dec, started_at, quality_flags, "
        "1 AS same, 2 AS same FROM episodes LIMIT 1"
    )
    body = sql(api, query).json()
    nan, neg, dec, started, flags, one, two = body["rows"][0]
    assert (nan, neg, dec) == ("NaN", "-Infinity", "1.250")
    assert started.endswith("+00:00") and isinstance(flags, list)
    assert (one, two) == (1, 2)


def test_pinned_snapshot_reads_the_past(api: httpx.Client) -> None:
    now = sql(api, "SELECT count(*) AS n FROM episodes").json()
    assert now["rows"] == [[CORPUS_EPISODES]]
    # Snapshot 1 is the bootstrap, before the CDC follower loaded anything.
    past = sql(api, "SELECT count(*) AS n FROM episodes", snapshot_id=1).json()
    assert past["rows"] == [[0]] and past["snapshot_id"] == 1
    again = sql(api, "SELECT count(*) AS n FROM episodes", snapshot_id=now["snapshot_id"])
    assert again.json()["rows"] == now["rows"]


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT * FROM read_csv('/etc/passwd')", "table_function"),
        ("DELETE FROM episodes", "statement"),
        ("SELECT 1; SELECT 2", "statements"),
        ("SELECT * FROM mirror.episodes", "qualified_name"),
        ("SELECT * FROM api_tokens", "relation"),
        ("SELECT * FROM episodes AT (VERSION => 1)", "time_travel"),
        ("SELECT postgres_query('x', 'y')", "function"),
    ],
)
def test_guard_refuses_with_a_reason(api: httpx.Client, query: str, reason: str) -> None:
    response = sql(api, query)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["reason"] == reason
    assert response.json()["title"] == "Query refused"  # an exploration query, not a curation


def test_runaway_query_is_stopped_with_408(api: httpx.Client) -> None:
    response = sql(api, RUNAWAY, timeout_s=0.5)
    assert response.status_code == 408, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["timeout_s"] == 0.5


def test_row_cap_is_422(api: httpx.Client) -> None:
    response = sql(api, "SELECT id FROM episodes", max_rows=CORPUS_EPISODES - 1)
    assert response.status_code == 422
    assert response.json()["max_rows"] == CORPUS_EPISODES - 1
    assert sql(api, "SELECT id FROM episodes", max_rows=CORPUS_EPISODES).status_code == 200


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"sql": "SELECT 1 AS one", "snapshot_id": 10**9}, 404),
        ({"sql": ""}, 422),
        ({"sql": "SELECT 1", "timeout_s": 0}, 422),
        ({"sql": "SELECT 1", "snapshot_id": -1}, 422),
        ({"query": "SELECT 1"}, 422),
    ],
)
def test_bad_requests_are_problems(api: httpx.Client, body: dict[str, object], status: int) -> None:
    response = api.post("/v1/sql", json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM


def test_corpus_stats(api: httpx.Client) -> None:
    response = api.get("/v1/corpus/stats")
    assert response.status_code == 200, response.text
    stats = response.json()
    assert stats["episodes"] == CORPUS_EPISODES
    for name in ("by_robot", "by_task", "by_site"):
        groups = stats[name]
        assert sum(g["episodes"] for g in groups) == CORPUS_EPISODES
        assert sum(g["hours"] for g in groups) == pytest.approx(stats["hours"])
    expected = sql(api, "SELECT avg(CAST(success AS DOUBLE)) AS r FROM episodes").json()
    assert stats["success_rate"] == pytest.approx(expected["rows"][0][0])
    for stamp in ("schema_version", "pipeline_version", "robot_sw_version"):
        assert sum(v["episodes"] for v in stats["stamps"][stamp]) == CORPUS_EPISODES
    for flag in stats["quality_flags"]:
        assert flag["rate"] == pytest.approx(flag["episodes"] / CORPUS_EPISODES)


def test_corpus_stats_at_a_snapshot(api: httpx.Client) -> None:
    empty = api.get("/v1/corpus/stats", params={"snapshot_id": 1}).json()
    assert empty["episodes"] == 0 and empty["by_robot"] == []
    assert empty["success_rate"] is None and empty["snapshot_id"] == 1
