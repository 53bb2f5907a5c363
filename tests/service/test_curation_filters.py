"""Structured curations: filters compiled to guarded SQL, checked against the corpus itself,
and previews that match what a build then holds."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlglot
from pydantic import ValidationError
from sqlglot import exp

from curation.filters import CurationFilters, compile_filters
from curation.guard import check_curation
from manifests.manifest import open_manifest
from quarry.stack.lifecycle import Stack
from service.api.schemas import CurationCreate
from tests.fixtures.stack import run_json
from warehouse.base import CURATION_VIEWS
from warehouse.ducklake.backend import DuckLakeWarehouse

VIEWS = frozenset(CURATION_VIEWS)
EVERY_FILTER: dict[str, Any] = {
    "robots": ["koi-01", "heron-02"],
    "robot_models": ["koi-6"],
    "tasks": ["pick_cube"],
    "sites": ["sfo"],
    "operators": ["op-ana"],
    "success": True,
    "exclude_flags": ["camera_blackout"],
    "schema_version": {"min": 1, "max": 3},
    "pipeline_version": {"min": 1},
    "robot_sw_version": {"min": "3.1", "max": "3.2.0"},
    "robot_sw_versions": ["3.2.0"],
    "started_at": {"start": "2020-01-01T00:00:00+02:00", "end": "2100-01-01T00:00:00Z"},
    "labels": [{"key": "phase", "values": ["grasp"]}, {"key": "reviewed"}],
    "segments": {"key": "phase", "values": ["grasp", "lift"]},
    "split": {"part": "validation", "validation_fraction": 0.2, "seed": "s1"},
    "per_task_cap": 3,
    "columns": ["robot_id", "task_id", "success"],
}


# -- compiling (no stack) ------------------------------------------------------------------


def test_no_filters_is_every_episode() -> None:
    sql = compile_filters(CurationFilters())
    assert check_curation(sql, VIEWS).relations == {"episodes"}
    assert "WHERE" not in sql


def test_every_filter_compiles_to_sql_the_guard_accepts() -> None:
    checked = check_curation(compile_filters(CurationFilters.model_validate(EVERY_FILTER)), VIEWS)
    assert checked.relations == {"episodes", "episode_labels", "episode_quality_flags"}
    # What runs is the re-rendered, checked text; it passes the guard again unchanged.
    assert check_curation(checked.normalized, VIEWS).normalized == checked.normalized


def test_values_become_literals_never_sql() -> None:
    hostile = "x') OR 1=1; DROP TABLE episodes; --"
    filters = {"robots": [hostile], "labels": [{"key": hostile}]}
    sql = compile_filters(CurationFilters.model_validate(filters))
    tree = check_curation(sql, VIEWS).tree
    literals = [node.this for node in tree.find_all(exp.Literal) if node.is_string]
    assert literals.count(hostile) == 2
    assert len(sqlglot.parse(sql, read="duckdb")) == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"robots": []},
        {"split": {"part": "validation", "validation_fraction": 1.0}},
        {"robot_sw_version": {"min": "3.x"}},
        {"started_at": {"start": "2026-01-01T00:00:00"}},  # no UTC offset
        {"columns": ["uri"]},
        {"columns": ["task_id", "task_id"]},
        {"per_task_cap": 0},
        {"unknown": 1},
        {"tasks": ["pick\x00"]},
        {"success": "yes"},  # no coercion: a boolean is true or false
        {"success": 1},
        {"schema_version": {"min": "2"}},
        {"per_task_cap": 2.0},
    ],
)
def test_bad_filters_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CurationFilters.model_validate(bad)


def test_a_curation_is_sql_or_filters_not_both() -> None:
    CurationCreate(sql="SELECT * FROM episodes")
    CurationCreate(filters=CurationFilters())
    with pytest.raises(ValidationError, match="exactly one"):
        CurationCreate(sql="SELECT * FROM episodes", filters=CurationFilters())
    with pytest.raises(ValidationError, match="exactly one"):
        CurationCreate()


# -- against the corpus ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def episodes(corpus: Stack) -> list[dict[str, Any]]:
    """The corpus as the curation views show it."""
    with DuckLakeWarehouse(corpus.settings.warehouse_config()) as warehouse:
        rows: list[dict[str, Any]] = warehouse.query_arrow(
            "SELECT id, robot_id, task_id, success, robot_sw_version, started_at, "
            "pipeline_version, duration_s FROM episodes ORDER BY id"
        ).to_pylist()
    return rows


def curate(api: httpx.Client, **body: Any) -> dict[str, Any]:
    response = api.post("/v1/curations", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def episode_ids(api: httpx.Client, manifest_id: str, folder: Path) -> list[str]:
    path = folder / f"{manifest_id}.arrow"
    path.write_bytes(api.get(f"/v1/manifests/{manifest_id}/arrow").content)
    return [str(v) for v in open_manifest(path).table(["episode_id"])["episode_id"].to_pylist()]


def test_list_filters_select_what_sql_selects(
    api: httpx.Client, episodes: list[dict[str, Any]], tmp_path: Path
) -> None:
    robot = next(e["robot_id"] for e in episodes if e["success"])
    by_filter = curate(api, filters={"robots": [robot], "success": True})
    expected = sorted(e["id"] for e in episodes if e["robot_id"] == robot and e["success"])
    assert by_filter["rows"] == len(expected) > 0
    assert episode_ids(api, by_filter["manifest_id"], tmp_path) == expected
    by_sql = curate(api, sql=f"SELECT id FROM episodes WHERE robot_id = '{robot}' AND success")
    assert by_sql["samples"] == by_filter["samples"]


def test_manifest_records_the_compiled_sql(api: httpx.Client) -> None:
    filters = {"tasks": ["pick_cube", "pick_place_cube"], "columns": ["task_id"]}
    built = curate(api, filters=filters)
    detail = api.get(f"/v1/manifests/{built['manifest_id']}").json()
    expected = check_curation(
        compile_filters(CurationFilters.model_validate(filters)), VIEWS
    ).normalized
    assert detail["sql"] == expected


def test_split_parts_are_disjoint_and_cover_the_corpus(
    api: httpx.Client, episodes: list[dict[str, Any]], tmp_path: Path
) -> None:
    parts = {}
    for part in ("train", "validation"):
        split = {"part": part, "validation_fraction": 0.5, "seed": "t"}
        built = curate(api, filters={"split": split})
        parts[part] = set(episode_ids(api, built["manifest_id"], tmp_path))
    assert parts["train"].isdisjoint(parts["validation"])
    assert parts["train"] | parts["validation"] == {e["id"] for e in episodes}
    expected = {e["id"] for e in episodes if _bucket("t", e["id"]) < 0.5}
    assert parts["validation"] == expected


def test_per_task_cap_keeps_the_smallest_hashes(
    api: httpx.Client, episodes: list[dict[str, Any]], tmp_path: Path
) -> None:
    built = curate(api, filters={"per_task_cap": 1, "cap_seed": "c"})
    again = curate(api, filters={"per_task_cap": 1, "cap_seed": "c"})
    assert again["manifest_id"] == built["manifest_id"]
    by_task: dict[str, list[str]] = {}
    for e in episodes:
        by_task.setdefault(e["task_id"], []).append(e["id"])
    expected = sorted(min(ids, key=lambda i: (_md5("c", i), i)) for ids in by_task.values())
    assert episode_ids(api, built["manifest_id"], tmp_path) == expected


def test_stamp_and_time_ranges(api: httpx.Client, episodes: list[dict[str, Any]]) -> None:
    def rows(**filters: Any) -> int:
        return int(preview(api, filters=filters)["totals"]["episodes"])

    newer = [e for e in episodes if _version(e["robot_sw_version"]) >= (3, 0)]
    assert rows(robot_sw_version={"min": "3.0"}) == len(newer)
    assert rows(robot_sw_version={"max": "2.99"}) == len(episodes) - len(newer)
    assert rows(pipeline_version={"min": 1, "max": 1}) == len(episodes)
    assert rows(pipeline_version={"min": 2}) == 0
    assert rows(started_at={"start": "2100-01-01T00:00:00Z"}) == 0
    assert rows(started_at={"end": "2100-01-01T00:00:00Z"}) == len(episodes)


def preview(api: httpx.Client, **body: Any) -> dict[str, Any]:
    response = api.post("/v1/curations/preview", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_preview_matches_the_build(api: httpx.Client, episodes: list[dict[str, Any]]) -> None:
    body: dict[str, Any] = {"sql": "SELECT * FROM episodes", "sample_spec": {"anchor_stride": 3}}
    seen = preview(api, **body)
    built = curate(api, **body)
    assert seen["totals"]["episodes"] == seen["totals"]["slices"] == built["rows"]
    assert seen["totals"]["samples"] == built["samples"]
    assert seen["totals"]["hours"] == pytest.approx(sum(e["duration_s"] for e in episodes) / 3600)
    assert seen["snapshot_id"] <= built["snapshot_id"]  # CDC may commit in between
    pairs = {(e["robot_id"], e["task_id"]) for e in episodes}
    assert [(g["robot_id"], g["task_id"]) for g in seen["groups"]] == sorted(pairs)
    assert sum(g["samples"] for g in seen["groups"]) == built["samples"]


def test_preview_builds_nothing(api: httpx.Client) -> None:
    before = api.get("/v1/manifests", params={"limit": 1000}).json()["items"]
    seen = preview(api, filters={"tasks": ["pick_cube"], "columns": ["operator"]})
    assert "operator" in seen["sql"]
    after = api.get("/v1/manifests", params={"limit": 1000}).json()["items"]
    assert len(after) == len(before)


def test_sql_and_filters_together_is_a_422(api: httpx.Client) -> None:
    response = api.post("/v1/curations", json={"sql": "SELECT * FROM episodes", "filters": {}})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"


def test_a_loosely_typed_filter_is_a_422_naming_it(api: httpx.Client) -> None:
    response = api.post("/v1/curations", json={"filters": {"success": "yes"}})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert ["body", "filters", "success"] in [e["loc"] for e in response.json()["errors"]]


def _md5(seed: str, episode_id: str) -> str:
    return hashlib.md5(f"{seed}:{episode_id}".encode()).hexdigest()


def _bucket(seed: str, episode_id: str) -> float:
    return int(_md5(seed, episode_id)[:8], 16) / 16**8


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def test_cli_previews_and_builds_from_filters(corpus: Stack, tmp_path: Path) -> None:
    filters = tmp_path / "filters.json"
    filters.write_text('{"split": {"part": "train"}, "columns": ["site"]}')
    state = corpus.settings.state_dir
    seen = run_json(state, "curate", "--filters-file", str(filters), "--preview")
    built = run_json(state, "curate", "--filters", filters.read_text())
    assert (built["rows"], built["samples"]) == (
        seen["totals"]["slices"],
        seen["totals"]["samples"],
    )
