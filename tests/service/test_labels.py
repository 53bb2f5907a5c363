"""Labels and retraction: written through the API to Postgres, carried to the curation views
by CDC, then curated by (or left out of every new curation)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from manifests.manifest import open_manifest
from quarry.stack.lifecycle import Stack
from service.tokens import Scope, create_token
from tests.fixtures.curation import scratch_episodes, wait_for, warehouse_count
from warehouse.ducklake.backend import DuckLakeWarehouse

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def episode(corpus_lake: DuckLakeWarehouse) -> dict[str, Any]:
    """One corpus episode: id and log-time range."""
    rows = corpus_lake.query_arrow("SELECT id, start_ns, end_ns FROM episodes ORDER BY id LIMIT 1")
    return dict(rows.to_pylist()[0])


def label(api: httpx.Client, episode_id: str, *labels: dict[str, Any]) -> httpx.Response:
    return api.post(f"/v1/episodes/{episode_id}/labels", json={"labels": list(labels)})


def wait_for_label(corpus_lake: DuckLakeWarehouse, key: str, count: int) -> None:
    sql = f"SELECT count(*) AS n FROM episode_labels WHERE key = '{key}'"
    wait_for(lambda: warehouse_count(corpus_lake, sql) == count, what=f"{count} labels {key!r}")


def manifest_slices(api: httpx.Client, manifest_id: str, folder: Path) -> list[dict[str, Any]]:
    path = folder / f"{manifest_id}.arrow"
    path.write_bytes(api.get(f"/v1/manifests/{manifest_id}/arrow").content)
    table = open_manifest(path).table(["episode_id", "start_ns", "end_ns"])
    return [dict(row) for row in table.to_pylist()]


def test_label_then_curate_by_labelled_segments(
    api: httpx.Client, corpus_lake: DuckLakeWarehouse, episode: dict[str, Any], tmp_path: Path
) -> None:
    key = f"phase-{uuid.uuid4().hex[:8]}"
    start, end = episode["start_ns"], episode["end_ns"]
    third = (end - start) // 3
    segments = [(start, start + third, "reach"), (start + third, end, "grasp")]
    response = label(
        api,
        episode["id"],
        *({"key": key, "value": v, "start_ns": s, "end_ns": e} for s, e, v in segments),
        {"key": key, "value": "whole-episode"},
    )
    assert response.status_code == 201, response.text
    assert [x["value"] for x in response.json()["labels"]] == ["reach", "grasp", "whole-episode"]
    listed = api.get(f"/v1/episodes/{episode['id']}/labels").json()["labels"]
    assert {x["key"] for x in listed} >= {key}

    wait_for_label(corpus_lake, key, 3)
    sliced = api.post("/v1/curations", json={"filters": {"segments": {"key": key}}})
    assert sliced.status_code == 201, sliced.text
    slices = manifest_slices(api, sliced.json()["manifest_id"], tmp_path)
    assert [(s["start_ns"], s["end_ns"]) for s in slices] == [(s, e) for s, e, _ in segments]
    only_grasp = {"segments": {"key": key, "values": ["grasp"]}}
    assert api.post("/v1/curations", json={"filters": only_grasp}).json()["rows"] == 1
    labelled = {"labels": [{"key": key, "values": ["whole-episode"]}]}
    assert (
        api.post("/v1/curations/preview", json={"filters": labelled}).json()["totals"]["episodes"]
        == 1
    )
    by_sql = (
        "SELECT episode_id AS id, start_ns, end_ns, value AS phase FROM episode_labels "
        f"WHERE key = '{key}' AND start_ns IS NOT NULL"
    )
    assert api.post("/v1/curations", json={"sql": by_sql}).json()["rows"] == 2


def test_segment_outside_the_episode_is_a_422(api: httpx.Client, episode: dict[str, Any]) -> None:
    outside = {
        "key": "k",
        "value": "v",
        "start_ns": episode["end_ns"],
        "end_ns": episode["end_ns"] + 10,
    }
    response = label(api, episode["id"], outside)
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["reason"] == "segment_out_of_range"


@pytest.mark.parametrize(
    "bad",
    [
        {"key": "k", "value": "v", "start_ns": 5},
        {"key": "k", "value": "v", "start_ns": 5, "end_ns": 5},
        {"key": "", "value": "v"},
    ],
)
def test_malformed_label_is_a_422(
    api: httpx.Client, episode: dict[str, Any], bad: dict[str, Any]
) -> None:
    response = label(api, episode["id"], bad)
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM


@pytest.mark.parametrize("episode_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_unknown_episode_is_404(api: httpx.Client, episode_id: str) -> None:
    for response in (
        label(api, episode_id, {"key": "k", "value": "v"}),
        api.get(f"/v1/episodes/{episode_id}/labels"),
        api.post(f"/v1/episodes/{episode_id}/retract"),
        api.get(f"/v1/episodes/{episode_id}/manifests"),
    ):
        assert response.status_code == 404, response.text
        assert response.headers["content-type"] == PROBLEM


def test_retract_needs_the_curate_scope(
    api: httpx.Client, corpus: Stack, episode: dict[str, Any]
) -> None:
    with psycopg.connect(corpus.settings.operational_dsn(), autocommit=True) as conn:
        token = create_token(conn, "reader", [Scope.READ])
    reader = httpx.Client(base_url=str(api.base_url), headers={"Authorization": f"Bearer {token}"})
    response = reader.post(f"/v1/episodes/{episode['id']}/retract")
    assert response.status_code == 403
    labels = {"labels": [{"key": "k", "value": "v"}]}
    assert reader.post(f"/v1/episodes/{episode['id']}/labels", json=labels).status_code == 403
    assert reader.get(f"/v1/episodes/{episode['id']}/labels").status_code == 200


def test_retracted_episode_leaves_new_curations_and_lists_old_manifests(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    with scratch_episodes(corpus, corpus_lake, 2) as ids:
        listed = ", ".join(f"'{i}'" for i in ids)
        before = api.post(
            "/v1/curations", json={"sql": f"SELECT id FROM episodes WHERE id IN ({listed})"}
        )
        assert before.json()["rows"] == 2
        manifest_id = before.json()["manifest_id"]

        retracted = api.post(f"/v1/episodes/{ids[0]}/retract", json={"reason": "bad calibration"})
        assert retracted.status_code == 200, retracted.text
        body = retracted.json()
        assert body["status"] == "retracted" and not body["already_retracted"]
        assert [m["id"] for m in body["manifests"]] == [manifest_id]
        again = api.post(f"/v1/episodes/{ids[0]}/retract").json()
        assert again["already_retracted"]

        gone = f"SELECT count(*) AS n FROM episodes WHERE id = '{ids[0]}'"
        wait_for(lambda: warehouse_count(corpus_lake, gone) == 0, what="the retraction by CDC")
        after = api.post(
            "/v1/curations", json={"sql": f"SELECT id FROM episodes WHERE id IN ({listed})"}
        )
        assert after.json()["rows"] == 1
        held = api.get(f"/v1/manifests/{manifest_id}/episodes").json()["items"]
        assert {(x["episode_id"], x["status"]) for x in held} == {
            (ids[0], "retracted"),
            (ids[1], "active"),
        }
