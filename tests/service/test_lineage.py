"""Reproducibility and lineage: a rebuild at the pinned snapshot gives the same bytes even after
the data moved on; `quarry manifests diff` says what changed; the registry reaches the
warehouse by CDC; which manifests hold an episode, which of a manifest's episodes are stale;
and the example curations of sql/curations/ run as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlglot
from sqlglot import exp

from curation.guard import CurationRefusedError, check_curation
from curation.params import placeholder_name, placeholders
from quarry.settings import SQL_ROOT
from quarry.stack.lifecycle import Stack
from tests.fixtures.curation import scratch_episodes, wait_for, warehouse_count
from tests.fixtures.stack import CORPUS_EPISODES, run_json, run_quarry
from warehouse.base import CURATION_VIEWS
from warehouse.ducklake.backend import DuckLakeWarehouse

EXAMPLES = sorted((SQL_ROOT / "curations").glob("*.sql"))


def curate(api: httpx.Client, sql: str, **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/curations", json={"sql": sql, **extra})
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def wait_for_registry(corpus_lake: DuckLakeWarehouse, manifest_id: str, rows: int) -> None:
    """Until CDC has carried the manifest and its episodes to the warehouse."""
    sql = f"SELECT count(*) AS n FROM manifest_episodes WHERE manifest_id = '{manifest_id}'"
    wait_for(lambda: warehouse_count(corpus_lake, sql) == rows, what=f"manifest {manifest_id}")


def example(path: Path, **params: str | int) -> str:
    """The example's SQL with the values of its ``params`` CTE set, through the syntax tree."""
    tree = sqlglot.parse_one(path.read_text(), read="duckdb")
    cte = next(c for c in tree.find_all(exp.CTE) if c.alias == "params")
    for alias in cte.this.find_all(exp.Alias):
        if alias.alias in params:
            value = params.pop(alias.alias)
            literal = (
                exp.Literal.string(value) if isinstance(value, str) else exp.Literal.number(value)
            )
            alias.this.replace(literal)
    assert not params, f"{path.name} has no parameters {sorted(params)}"
    return tree.sql(dialect="duckdb")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_curations_pass_the_guard(path: Path) -> None:
    assert path.read_text().lstrip().startswith("--"), "say what the curation is for"
    tree = sqlglot.parse_one(path.read_text(), read="duckdb")
    names = {str(placeholder_name(node)) for node in placeholders(tree)}
    check_curation(path.read_text(), frozenset(CURATION_VIEWS), dict.fromkeys(names, "2"))
    if names:  # and refused with a placeholder left unfilled, naming it
        with pytest.raises(CurationRefusedError, match="is not filled"):
            check_curation(path.read_text(), frozenset(CURATION_VIEWS))


def test_examples_without_parameters_run(api: httpx.Client, corpus: Stack) -> None:
    plain = [
        path
        for path in EXAMPLES
        if not placeholders(sqlglot.parse_one(path.read_text(), read="duckdb"))
    ]
    assert len(plain) >= 3
    for path in plain:  # on the small corpus some examples match nothing: allow_empty
        assert curate(api, path.read_text(), allow_empty=True)["manifest_id"], path.name
    by_cli = run_json(
        corpus.settings.state_dir, "curate", "--sql-file", str(plain[0]), "--allow-empty"
    )
    assert by_cli["reused"]


def test_registry_reaches_the_warehouse_and_lists_an_episodes_manifests(
    api: httpx.Client, corpus_lake: DuckLakeWarehouse
) -> None:
    built = curate(api, "SELECT id, site FROM episodes WHERE steps > 2")
    wait_for_registry(corpus_lake, built["manifest_id"], built["rows"])
    mirrored = corpus_lake.query_arrow(
        f"SELECT rows, snapshot_id FROM manifests WHERE id = '{built['manifest_id']}'"
    ).to_pylist()
    assert mirrored == [{"rows": built["rows"], "snapshot_id": built["snapshot_id"]}]
    episode_id = corpus_lake.query_arrow(
        f"SELECT min(episode_id) AS e FROM manifest_episodes "
        f"WHERE manifest_id = '{built['manifest_id']}'"
    )["e"][0].as_py()
    held = api.get(f"/v1/episodes/{episode_id}/manifests").json()["manifests"]
    assert built["manifest_id"] in {m["id"] for m in held}


def test_rebuild_at_the_pinned_snapshot_is_identical_after_the_data_moved(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    old = curate(api, "SELECT * FROM episodes")
    assert old["rows"] == CORPUS_EPISODES
    with scratch_episodes(corpus, corpus_lake, 2) as ids:
        rebuilt = api.post(f"/v1/manifests/{old['manifest_id']}/rebuild")
        assert rebuilt.status_code == 200, rebuilt.text
        assert rebuilt.json() == {
            "manifest_id": old["manifest_id"],
            "rebuilt_id": old["manifest_id"],
            "identical": True,
            "snapshot_id": old["snapshot_id"],
            "rows": CORPUS_EPISODES,
            "samples": old["samples"],
        }
        new = curate(api, "SELECT * FROM episodes")
        assert new["rows"] == CORPUS_EPISODES + 2
        assert new["snapshot_id"] > old["snapshot_id"]
        state = corpus.settings.state_dir
        diff = run_json(state, "manifests", "diff", old["manifest_id"], new["manifest_id"])
        assert diff["added"] == sorted(ids)
        assert diff["removed"] == [] and diff["changed"] == []
        assert diff["unchanged"] == CORPUS_EPISODES
        # The clones carry no per-episode statistics, so the normalization stays the same.
        assert set(diff["metadata"]) == {"snapshot_id", "cdc_position"}
        cli = run_json(state, "manifests", "rebuild", new["manifest_id"])
        assert cli["identical"]


def test_rebuild_of_an_unknown_manifest_is_404(api: httpx.Client) -> None:
    response = api.post("/v1/manifests/" + "f" * 64 + "/rebuild")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


def test_stale_episodes_of_a_manifest(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    with scratch_episodes(corpus, corpus_lake, 3, pipeline_version=0) as stale:
        built = curate(api, "SELECT id FROM episodes WHERE pipeline_version <= 1")
        manifest_id = built["manifest_id"]
        assert built["rows"] == CORPUS_EPISODES + 3

        pages, cursor = [], None
        while True:
            params: dict[str, Any] = {"pipeline_version_below": 1, "limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = api.get(f"/v1/manifests/{manifest_id}/episodes", params=params).json()
            pages.append(page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [len(p) for p in pages] == [2, 1]
        assert sorted(e["episode_id"] for p in pages for e in p) == sorted(stale)
        everything = api.get(f"/v1/manifests/{manifest_id}/episodes").json()["items"]
        assert len(everything) == CORPUS_EPISODES + 3

        wait_for_registry(corpus_lake, manifest_id, built["rows"])
        state = corpus.settings.state_dir
        sql = example(
            SQL_ROOT / "curations" / "stale_episodes_of_manifest.sql",
            manifest_id=manifest_id,
            pipeline_version_below=1,
        )
        assert run_json(state, "curate", "--sql", sql)["rows"] == 3
        file = SQL_ROOT / "curations" / "stale_episodes_of_manifest.sql"
        params = ["--param", f"manifest_id={manifest_id}", "--param", "pipeline_version_below=1"]
        assert run_json(state, "curate", "--sql-file", str(file), *params)["rows"] == 3
        cli = run_json(state, "manifests", "episodes", manifest_id, "--pipeline-below", "1")
        assert sorted(e["episode_id"] for e in cli["items"]) == sorted(stale)

        api.post(f"/v1/episodes/{stale[0]}/retract")
        gone = f"SELECT count(*) AS n FROM episodes WHERE id = '{stale[0]}'"
        wait_for(lambda: warehouse_count(corpus_lake, gone) == 0, what="the retraction")
        sql = example(
            SQL_ROOT / "curations" / "manifest_without_retracted.sql", manifest_id=manifest_id
        )
        assert curate(api, sql)["rows"] == CORPUS_EPISODES + 2


def test_bad_cursor_is_a_400(api: httpx.Client) -> None:
    manifest_id = curate(api, "SELECT id FROM episodes")["manifest_id"]
    response = api.get(f"/v1/manifests/{manifest_id}/episodes", params={"cursor": "nope"})
    assert response.status_code == 400


def test_placeholders_are_filled_by_params_or_refused(api: httpx.Client, corpus: Stack) -> None:
    sql = (SQL_ROOT / "curations" / "manifest_without_retracted.sql").read_text()
    for route in ("/v1/curations", "/v1/curations/preview", "/v1/sql"):
        response = api.post(route, json={"sql": sql})
        assert response.status_code == 400, response.text
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["placeholder"] == "manifest_id" and problem["reason"] == "placeholder"
        assert "'<manifest_id>' is not filled" in problem["detail"]
    manifest_id = curate(api, "SELECT id FROM episodes")["manifest_id"]
    filled = {"sql": sql, "params": {"manifest_id": manifest_id}}
    assert api.post("/v1/curations/preview", json=filled).status_code == 200
    query = "SELECT count(*) AS n FROM episodes WHERE id = '<id>' OR steps > '<steps>'"
    hostile = {"sql": query, "params": {"id": "' OR 1=1 --", "steps": 10**9}}
    assert api.post("/v1/sql", json=hostile).json()["rows"] == [[0]]
    nested = api.post("/v1/sql", json={"sql": query, "params": {"id": {"a": 1}}})
    assert nested.status_code == 422
    filters = {"filters": {"success": True}, "params": {"id": "x"}}
    assert api.post("/v1/curations", json=filters).status_code == 422

    state = corpus.settings.state_dir
    done = run_quarry(state, "curate", "--sql", sql, check=False)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--param manifest_id=" in done.stderr
    done = run_quarry(state, "sql", query, "--param", "id", check=False)
    assert done.returncode == 2 and "is not NAME=VALUE" in done.stderr
    done = run_quarry(state, "sql", query, "--param", "id=a", "--param", "steps=0")
    assert "(1 row" in done.stdout
