"""The episode catalog over HTTP: list (paged, filtered, retracted episodes included), show,
restore a retraction, remove a label; each change reaches the warehouse by CDC."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
import pytest

from quarry.stack.lifecycle import Stack
from service.tokens import Scope, create_token
from tests.fixtures.curation import scratch_episodes, wait_for, warehouse_count
from warehouse.ducklake.backend import DuckLakeWarehouse

PROBLEM = "application/problem+json"


def operational_ids(stack: Stack) -> list[str]:
    with psycopg.connect(stack.settings.operational_dsn(), autocommit=True) as conn:
        return [str(row[0]) for row in conn.execute("SELECT id FROM episodes ORDER BY id")]


def test_list_pages_through_every_episode_by_id(api: httpx.Client, corpus: Stack) -> None:
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 4} | ({"cursor": cursor} if cursor else {})
        page = api.get("/v1/episodes", params=params)
        assert page.status_code == 200, page.text
        seen += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert [e["id"] for e in seen] == operational_ids(corpus)
    robot = seen[0]["robot_id"]
    only = api.get("/v1/episodes", params={"robot_id": robot, "limit": 1000}).json()["items"]
    assert only and {e["robot_id"] for e in only} == {robot}
    assert api.get("/v1/episodes", params={"cursor": "nope"}).status_code == 400


def test_show_describes_one_episode(api: httpx.Client, corpus: Stack) -> None:
    episode_id = operational_ids(corpus)[0]
    detail = api.get(f"/v1/episodes/{episode_id}").json()
    with psycopg.connect(corpus.settings.operational_dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT uri, sha256, robot_id, status FROM episodes WHERE id = %s", (episode_id,)
        ).fetchone()
    assert (detail["uri"], detail["sha256"], detail["robot_id"], detail["status"]) == row
    assert isinstance(detail["quality_flags"], list) and detail["labels"] >= 0


def test_restore_undoes_a_retraction(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    with scratch_episodes(corpus, corpus_lake, 1) as (episode_id,):
        visible = f"SELECT count(*) AS n FROM episodes WHERE id = '{episode_id}'"
        api.post(f"/v1/episodes/{episode_id}/retract", json={"reason": "blurry"})
        wait_for(lambda: warehouse_count(corpus_lake, visible) == 0, what="the retraction")
        listed = api.get("/v1/episodes", params={"status": "retracted", "limit": 1000}).json()
        assert episode_id in {e["id"] for e in listed["items"]}

        restored = api.post(f"/v1/episodes/{episode_id}/restore")
        assert restored.status_code == 200, restored.text
        assert restored.json() == {
            "episode_id": episode_id,
            "status": "active",
            "already_active": False,
        }
        wait_for(lambda: warehouse_count(corpus_lake, visible) == 1, what="the restore by CDC")
        assert api.post(f"/v1/episodes/{episode_id}/restore").json()["already_active"]
        detail = api.get(f"/v1/episodes/{episode_id}").json()
        assert detail["status"] == "active"
        assert [r["reason"] for r in detail["retractions"]] == ["blurry"]  # the log is kept


def test_removing_a_label_reaches_the_warehouse(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    key = f"rm-{uuid.uuid4().hex[:8]}"
    with scratch_episodes(corpus, corpus_lake, 1) as (episode_id,):
        body = {"labels": [{"key": key, "value": "a"}, {"key": key, "value": "b"}]}
        added = api.post(f"/v1/episodes/{episode_id}/labels", json=body).json()["labels"]
        count = f"SELECT count(*) AS n FROM episode_labels WHERE key = '{key}'"
        wait_for(lambda: warehouse_count(corpus_lake, count) == 2, what="the labels")

        gone = api.delete(f"/v1/episodes/{episode_id}/labels/{added[0]['id']}")
        assert gone.status_code == 200, gone.text
        assert gone.json() == added[0]
        left = api.get(f"/v1/episodes/{episode_id}/labels").json()["labels"]
        assert [x["value"] for x in left] == ["b"]
        wait_for(lambda: warehouse_count(corpus_lake, count) == 1, what="the delete by CDC")
        again = api.delete(f"/v1/episodes/{episode_id}/labels/{added[0]['id']}")
        assert again.status_code == 404 and again.headers["content-type"] == PROBLEM
        # a label is removed only from its own episode (the scratch one's random ID may sort
        # first, so take the first that is another)
        other = next(i for i in operational_ids(corpus) if i != episode_id)
        assert api.delete(f"/v1/episodes/{other}/labels/{added[1]['id']}").status_code == 404


@pytest.mark.parametrize("episode_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_unknown_episode_is_404(api: httpx.Client, episode_id: str) -> None:
    for response in (
        api.get(f"/v1/episodes/{episode_id}"),
        api.post(f"/v1/episodes/{episode_id}/restore"),
        api.delete(f"/v1/episodes/{episode_id}/labels/1"),
    ):
        assert response.status_code == 404, response.text
        assert response.headers["content-type"] == PROBLEM


def test_restore_and_label_removal_need_the_curate_scope(api: httpx.Client, corpus: Stack) -> None:
    with psycopg.connect(corpus.settings.operational_dsn(), autocommit=True) as conn:
        token = create_token(conn, "episode-reader", [Scope.READ])
    reader = httpx.Client(base_url=str(api.base_url), headers={"Authorization": f"Bearer {token}"})
    episode_id = operational_ids(corpus)[0]
    assert reader.post(f"/v1/episodes/{episode_id}/restore").status_code == 403
    assert reader.delete(f"/v1/episodes/{episode_id}/labels/1").status_code == 403
    assert reader.get("/v1/episodes").status_code == 200
    assert reader.get(f"/v1/episodes/{episode_id}").status_code == 200
