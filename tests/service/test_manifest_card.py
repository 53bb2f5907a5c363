"""A manifest's dataset card (``GET /v1/manifests/{id}/card``, ``quarry manifests card``):
its episodes, hours, robots/tasks/sites, success rate, QC flags and stamp ranges as the
warehouse held them at the manifest's snapshot, mean and std per state and action dimension
from the file, and its SQL, snapshot and CDC position; JSON or Markdown."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from manifests.manifest import open_manifest
from quarry.stack.lifecycle import Stack
from tests.fixtures.curation import scratch_episodes, wait_for, warehouse_count
from tests.fixtures.stack import CORPUS_EPISODES, run_json, run_quarry
from warehouse.ducklake.backend import DuckLakeWarehouse

WHOLE = "SELECT *, 'card' AS case_ FROM episodes"


@pytest.fixture(scope="module")
def whole(api: httpx.Client) -> dict[str, Any]:
    response = api.post(
        "/v1/curations", json={"sql": WHOLE, "name": "whole | corpus", "tags": ["card"]}
    )
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def test_the_card_of_the_whole_corpus_agrees_with_the_corpus_statistics(
    api: httpx.Client, whole: dict[str, Any], corpus: Stack
) -> None:
    card = api.get(f"/v1/manifests/{whole['manifest_id']}/card").json()
    stats = api.get("/v1/corpus/stats", params={"snapshot_id": card["snapshot_id"]}).json()
    assert card["episodes"] == card["episodes_described"] == CORPUS_EPISODES == stats["episodes"]
    assert card["hours"] == pytest.approx(stats["hours"])
    assert card["success_rate"] == pytest.approx(stats["success_rate"])
    for key in ("by_robot", "by_task", "by_site"):
        ours = {g["key"]: (g["episodes"], g["success_rate"]) for g in card[key]}
        theirs = {g["key"]: (g["episodes"], g["success_rate"]) for g in stats[key]}
        assert ours == theirs, key
    assert {f["flag"]: f["episodes"] for f in card["quality_flags"]} == {
        f["flag"]: f["episodes"] for f in stats["quality_flags"]
    }
    for stamp, counted in stats["stamps"].items():
        values = card["stamps"][stamp]["values"]
        assert {v["version"]: v["episodes"] for v in values} == {
            c["version"]: c["episodes"] for c in counted
        }
        assert card["stamps"][stamp]["min"] == values[0]["version"]
        assert card["stamps"][stamp]["max"] == values[-1]["version"]
    assert (card["name"], card["tags"], card["format_version"]) == ("whole | corpus", ["card"], 2)


def test_the_card_has_the_files_normalization_and_provenance(
    api: httpx.Client, whole: dict[str, Any], corpus: Stack
) -> None:
    card = api.get(f"/v1/manifests/{whole['manifest_id']}/card").json()
    manifest = open_manifest(corpus.paths.manifests / f"{whole['manifest_id']}.arrow")
    for field in ("state", "action"):
        stats = manifest.field_stats(field)
        assert stats is not None
        np.testing.assert_array_equal(card["normalization"][field]["mean"], stats.mean())
        np.testing.assert_array_equal(card["normalization"][field]["std"], stats.std())
        assert card["normalization"][field]["count"] == stats.count
    slices = manifest.table(["start_ns", "end_ns"]).to_pydict()
    ns = sum(e - s for s, e in zip(slices["start_ns"], slices["end_ns"], strict=True))
    assert card["hours"] == pytest.approx(ns / 3.6e12)
    assert card["sql"] == manifest.sql and card["snapshot_id"] == manifest.snapshot_id
    assert card["cdc_position"] == manifest.cdc_position
    assert isinstance(card["cdc_position"], dict) and "lsn_text" in card["cdc_position"]


def test_markdown_on_request_and_from_the_cli(
    api: httpx.Client, whole: dict[str, Any], corpus: Stack
) -> None:
    response = api.get(
        f"/v1/manifests/{whole['manifest_id']}/card", headers={"Accept": "text/markdown"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/markdown")
    text = response.text
    assert text.startswith("# whole \\| corpus\n")  # a user's text cannot make a table
    assert f"Manifest `{whole['manifest_id']}`, format version 2" in text
    for heading in ("Contents", "Robots", "Tasks", "Sites", "Quality flags", "Stamps"):
        assert f"\n## {heading}\n" in text
    assert "\n## Normalization: state (" in text and "\n## Normalization: action (" in text
    assert (
        "```sql\n" + open_manifest(corpus.paths.manifests / f"{whole['manifest_id']}.arrow").sql
        in text
    )
    printed = run_quarry(corpus.paths.root, "manifests", "card", whole["manifest_id"][:8]).stdout
    assert printed == text
    as_json = run_json(corpus.paths.root, "manifests", "card", whole["manifest_id"][:8])
    assert as_json["manifest_id"] == whole["manifest_id"]


def test_the_card_describes_the_manifest_as_built(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    with scratch_episodes(corpus, corpus_lake, 2, pipeline_version=0) as ids:
        sql = "SELECT id FROM episodes WHERE pipeline_version = 0"
        built = api.post("/v1/curations", json={"sql": sql}).json()
        before = api.get(f"/v1/manifests/{built['manifest_id']}/card").json()
        assert before["stamps"]["pipeline_version"]["values"] == [{"version": "0", "episodes": 2}]
        with psycopg.connect(corpus.settings.operational_dsn(), autocommit=True) as conn:
            conn.execute(
                "UPDATE episodes SET pipeline_version = 7 WHERE id = ANY(%s::uuid[])", (ids,)
            )
        wait_for(
            lambda: (
                warehouse_count(
                    corpus_lake, "SELECT count(*) AS n FROM episodes WHERE pipeline_version = 7"
                )
                == 2
            ),
            what="the restamped episodes in the warehouse",
        )
        after = api.get(f"/v1/manifests/{built['manifest_id']}/card").json()
        assert after == before
