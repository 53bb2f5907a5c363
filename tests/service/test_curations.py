"""The curation and manifest API over HTTP, against the real stack with a small corpus."""

from __future__ import annotations

from typing import Any

import httpx
import pyarrow as pa
import pytest

from manifests.manifest import open_manifest
from tests.fixtures.stack import CORPUS_EPISODES

PROBLEM = "application/problem+json"


def curate(api: httpx.Client, sql: str, **extra: Any) -> httpx.Response:
    return api.post("/v1/curations", json={"sql": sql, **extra})


def test_select_star_is_a_curation_of_every_episode(api: httpx.Client) -> None:
    response = curate(api, "SELECT * FROM episodes")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["rows"] == CORPUS_EPISODES
    assert body["samples"] > 0
    detail = api.get(f"/v1/manifests/{body['manifest_id']}").json()
    assert detail["rows"] == CORPUS_EPISODES
    assert set(detail["norm_stats"]) == {"state", "action"}


def test_manifest_download_is_the_arrow_file_with_its_sha256_as_etag(
    api: httpx.Client, tmp_path: Any
) -> None:
    body = curate(api, "SELECT id, robot_id FROM episodes WHERE success").json()
    manifest_id = body["manifest_id"]
    response = api.get(f"/v1/manifests/{manifest_id}/arrow")
    assert response.status_code == 200
    assert response.headers["etag"] == f'"{manifest_id}"'
    path = tmp_path / f"{manifest_id}.arrow"
    path.write_bytes(response.content)
    manifest = open_manifest(path)
    assert manifest.verify() == manifest_id
    assert manifest.num_rows == body["rows"]
    assert manifest.extra_columns == ["robot_id"]
    assert pa.ipc.open_file(pa.BufferReader(response.content)).num_record_batches >= 1
    again = api.get(
        f"/v1/manifests/{manifest_id}/arrow", headers={"If-None-Match": f'"{manifest_id}"'}
    )
    assert again.status_code == 304
    partial = api.get(f"/v1/manifests/{manifest_id}/arrow", headers={"Range": "bytes=0-5"})
    assert partial.status_code == 206
    assert partial.content == b"ARROW1"


def test_sample_spec_changes_the_sample_count(api: httpx.Client) -> None:
    dense = curate(api, "SELECT * FROM episodes", sample_spec={"anchor_stride": 1}).json()
    sparse = curate(api, "SELECT * FROM episodes", sample_spec={"anchor_stride": 10}).json()
    assert dense["samples"] > sparse["samples"] * 5


def test_same_curation_is_reused(api: httpx.Client) -> None:
    first = curate(api, "SELECT id FROM episodes WHERE steps > 0").json()
    second = curate(api, "select id  from episodes where steps > 0 -- same").json()
    assert second["manifest_id"] == first["manifest_id"]


def test_manifest_list_pages(api: httpx.Client) -> None:
    curate(api, "SELECT id FROM episodes LIMIT 1")
    curate(api, "SELECT id FROM episodes LIMIT 2")
    page = api.get("/v1/manifests", params={"limit": 1}).json()
    assert len(page["items"]) == 1 and page["next_cursor"]
    rest = api.get("/v1/manifests", params={"limit": 1, "cursor": page["next_cursor"]}).json()
    assert rest["items"][0]["id"] != page["items"][0]["id"]


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("DROP TABLE episodes", "statement"),
        ("SELECT * FROM read_parquet('/etc/passwd')", "table_function"),
        ("SELECT * FROM episodes; SELECT 1", "statements"),
        ("SELECT robot_id FROM episodes", "no_episode_id"),
    ],
)
def test_refused_curation_is_a_400_problem(api: httpx.Client, sql: str, reason: str) -> None:
    response = curate(api, sql)
    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["reason"] == reason


def test_bad_sample_spec_is_a_400(api: httpx.Client) -> None:
    response = curate(api, "SELECT * FROM episodes", sample_spec={"frames_per_cam": 2})
    assert response.status_code == 400
    assert "frames_per_cam" in response.json()["detail"]


def test_unknown_manifest_is_404(api: httpx.Client) -> None:
    response = api.get("/v1/manifests/" + "0" * 64)
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM


def test_missing_or_bad_token_is_401(api: httpx.Client) -> None:
    bare = httpx.Client(base_url=str(api.base_url))
    assert bare.get("/v1/manifests").status_code == 401
    bad = bare.get("/v1/manifests", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.headers["content-type"] == PROBLEM


def test_health_needs_no_token(api: httpx.Client) -> None:
    bare = httpx.Client(base_url=str(api.base_url))
    assert bare.get("/healthz").status_code == 200
    assert bare.get("/readyz").status_code == 200
