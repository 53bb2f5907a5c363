"""Manifests a team can live with: a name, tags and a description at creation (HTTP and
``quarry curate``), kept in the registry and never in the file, shown by the list, edited
later (``PATCH``, ``quarry manifests edit``); and a curation with no sample is a 422 naming
its snapshot unless it says ``allow_empty``."""

from __future__ import annotations

import time
from typing import Any

import httpx
import psycopg
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from quarry.stack.lifecycle import Stack
from tests.fixtures.stack import run_json, run_quarry

PROBLEM = "application/problem+json"
EMPTY_SQL = "SELECT id FROM episodes WHERE task_id = 'no such task'"


def curate(api: httpx.Client, sql: str, **extra: Any) -> httpx.Response:
    return api.post("/v1/curations", json={"sql": sql, **extra})


def registry_count(stack: Stack) -> int:
    with psycopg.connect(stack.settings.operational_dsn()) as conn:
        row = conn.execute("SELECT count(*) FROM manifests").fetchone()
    assert row is not None
    return int(row[0])


def test_name_tags_and_description_are_registered_not_written_into_the_file(
    api: httpx.Client,
) -> None:
    sql = "SELECT id, 'named' AS case_ FROM episodes"
    plain = curate(api, sql + " WHERE success").json()
    named = curate(
        api,
        sql,
        name="pick successes, March",
        tags=["baseline", "team:perception", "baseline"],
        description="For the grasp policy.\nReviewed by Ana.",
    )
    assert named.status_code == 201, named.text
    body = named.json()
    assert body["name"] == "pick successes, March"
    assert body["tags"] == ["baseline", "team:perception"]
    assert body["description"] == "For the grasp policy.\nReviewed by Ana."
    detail = api.get(f"/v1/manifests/{body['manifest_id']}").json()
    assert (detail["name"], detail["tags"], detail["author"]) == (
        body["name"],
        body["tags"],
        "local-admin",
    )
    keys = ipc.open_file(pa.BufferReader(api.get(body["arrow_url"]).content)).schema.metadata
    assert sorted(keys) == [
        b"quarry.cdc_position",
        b"quarry.format_version",
        b"quarry.norm_stats",
        b"quarry.sample_spec",
        b"quarry.snapshot_id",
        b"quarry.sql",
    ]
    assert not any(b"March" in value or b"Ana" in value for value in keys.values())
    assert plain["name"] == "" and plain["tags"] == []


def test_a_reused_manifest_keeps_its_name_and_gains_the_tags(api: httpx.Client) -> None:
    sql = "SELECT id, 'reused' AS case_ FROM episodes"
    first = curate(api, sql, name="first", tags=["a"], description="one").json()
    again = curate(api, sql, name="second", tags=["b"], description="two").json()
    assert again["reused"] and again["manifest_id"] == first["manifest_id"]
    assert (again["name"], again["tags"], again["description"]) == ("first", ["a", "b"], "one")


def test_the_list_shows_them_and_filters_by_tag(api: httpx.Client, corpus: Stack) -> None:
    made = run_json(
        corpus.paths.root,
        "curate",
        "--sql",
        "SELECT id, 'listed' AS case_ FROM episodes",
        "--name",
        "listed by the CLI",
        "--tag",
        "cli-listed",
        "--tag",
        "v2",
        "--description",
        "made in a test",
    )
    assert (made["name"], made["tags"]) == ("listed by the CLI", ["cli-listed", "v2"])
    page = api.get("/v1/manifests", params={"tag": "cli-listed"}).json()
    assert [m["id"] for m in page["items"]] == [made["manifest_id"]]
    assert page["items"][0]["description"] == "made in a test"
    text = run_quarry(corpus.paths.root, "manifests", "list", "--tag", "cli-listed").stdout
    assert text.startswith(made["manifest_id"] + " ")
    assert "listed by the CLI  [cli-listed, v2]" in text


@pytest.mark.parametrize(
    "extra",
    [
        {"name": "two\nlines"},
        {"name": "x" * 201},
        {"tags": ["with space"]},
        {"tags": ["-leading"]},
        {"tags": [""]},
        {"tags": [f"t{i}" for i in range(33)]},
        {"description": "nul\x00"},
    ],
)
def test_a_bad_name_tag_or_description_is_a_422_and_registers_nothing(
    api: httpx.Client, corpus: Stack, extra: dict[str, Any]
) -> None:
    before = registry_count(corpus)
    response = curate(api, "SELECT id, 'bad' AS case_ FROM episodes", **extra)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    assert registry_count(corpus) == before


def test_edit_renames_tags_untags_and_retires(api: httpx.Client, corpus: Stack) -> None:
    made = curate(api, "SELECT id, 'edited' AS case_ FROM episodes", tags=["old"]).json()
    ref = made["manifest_id"][:10]
    edited = api.patch(
        f"/v1/manifests/{ref}",
        json={"name": "renamed", "add_tags": ["new", "z"], "remove_tags": ["old"]},
    ).json()
    assert (edited["name"], edited["tags"], edited["retired_at"]) == ("renamed", ["new", "z"], None)
    by_cli = run_json(
        corpus.paths.root,
        "manifests",
        "edit",
        ref,
        "--untag",
        "z",
        "--retire",
        "--description",
        "d",
    )
    assert by_cli["retired_at"] is not None
    assert (by_cli["tags"], by_cli["description"]) == (["new"], "d")
    listed = run_quarry(corpus.paths.root, "manifests", "list", "--tag", "new").stdout
    assert listed.rstrip().endswith("renamed  [new]  (retired)")
    back = api.patch(f"/v1/manifests/{ref}", json={"retired": False}).json()
    assert back["retired_at"] is None and back["name"] == "renamed"
    bad = api.patch(f"/v1/manifests/{ref}", json={"add_tags": ["no spaces"]})
    assert bad.status_code == 422


def test_a_curation_without_a_sample_is_a_422_naming_its_snapshot(
    api: httpx.Client, corpus: Stack
) -> None:
    before = registry_count(corpus)
    files = sorted(corpus.paths.manifests.iterdir())
    response = curate(api, EMPTY_SQL, name="nothing")
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert (problem["reason"], problem["matched_slices"]) == ("empty", 0)
    snapshot = problem["snapshot_id"]
    assert isinstance(snapshot, int) and f"warehouse snapshot {snapshot}" in problem["detail"]
    assert "allow_empty" in problem["detail"]
    assert registry_count(corpus) == before
    assert sorted(corpus.paths.manifests.iterdir()) == files  # nothing written either


def test_slices_too_short_for_a_sample_are_empty_too(api: httpx.Client) -> None:
    sql = "SELECT id, start_ns, start_ns AS end_ns FROM episodes"  # no anchor in [s, s)
    response = curate(api, sql, sample_spec={"anchor_stride": 5})
    assert response.status_code == 422
    problem = response.json()
    assert problem["matched_slices"] > 0
    assert "none long enough for a sample (one every 100 ms)" in problem["detail"]


def test_allow_empty_registers_an_empty_manifest_and_its_reuse_still_needs_it(
    api: httpx.Client,
) -> None:
    sql = EMPTY_SQL + " AND success"
    made = curate(api, sql, allow_empty=True)
    assert made.status_code == 201, made.text
    assert (made.json()["rows"], made.json()["samples"]) == (0, 0)
    again = curate(api, sql)
    assert again.status_code == 422 and again.json()["reason"] == "empty"
    assert curate(api, sql, allow_empty=True).json()["reused"]


def test_an_empty_curation_job_fails_with_the_snapshot(api: httpx.Client) -> None:
    job = curate(api, EMPTY_SQL + " AND steps > 0", mode="async").json()
    deadline = time.monotonic() + 60
    while job["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.1)
        job = api.get(job["url"]).json()
    assert job["status"] == "failed"
    assert (job["error"]["kind"], job["error"]["status"]) == ("EmptyCurationError", 422)
    assert f"snapshot {job['error']['snapshot_id']}" in job["error"]["detail"]


def test_the_cli_says_so_and_builds_it_with_allow_empty(corpus: Stack) -> None:
    sql = EMPTY_SQL + " AND steps > 1"
    refused = run_quarry(corpus.paths.root, "curate", "--sql", sql, check=False)
    assert refused.returncode != 0
    assert "matched nothing at warehouse snapshot" in refused.stderr
    made = run_json(corpus.paths.root, "curate", "--sql", sql, "--allow-empty")
    assert made["rows"] == 0
