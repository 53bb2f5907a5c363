"""``quarry manifests diff`` prints readable statistics: rows and samples side by side, the
episode counts, the SQL as a line diff and normalization as mean and std per dimension, never
raw JSON or Python dicts (``--json`` keeps the document); ``show`` prints the entry in words."""

from __future__ import annotations

from typing import Any

import httpx

from quarry.stack.lifecycle import Stack
from tests.fixtures.stack import run_json, run_quarry


def curate(api: httpx.Client, sql: str) -> dict[str, Any]:
    response = api.post("/v1/curations", json={"sql": sql})
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def test_diff_prints_counts_sql_and_normalization_in_words(
    api: httpx.Client, corpus: Stack
) -> None:
    every = curate(api, "SELECT id, 'diff-text' AS why FROM episodes")
    first = curate(api, "SELECT id, 'diff-text' AS why FROM episodes ORDER BY id LIMIT 2")
    state = corpus.paths.root
    a, b = first["manifest_id"], every["manifest_id"]
    doc = run_json(state, "manifests", "diff", a[:8], b[:10])
    text = run_quarry(state, "manifests", "diff", a[:8], b[:10]).stdout
    lines = text.splitlines()
    assert lines[:2] == [f"a  {a}", f"b  {b}"]
    rows = next(line for line in lines if line.startswith("rows "))
    assert rows.split()[1:3] == [str(doc["rows"]["a"]), str(doc["rows"]["b"])]
    added = len(doc["added"])
    assert added > 0
    assert f"episodes: {added} added, 0 removed, 0 changed, 2 unchanged" in lines
    assert "sql:" in lines and any(line.startswith("  -") for line in lines)
    assert "norm_stats:" in lines
    assert any(line.strip().startswith("state: steps ") for line in lines)
    assert any(line.split()[:2] == ["dim", "mean"] for line in lines)
    assert "{" not in text and "sum_sq" not in text  # no raw JSON or dicts


def test_show_prints_the_entry_in_words(api: httpx.Client, corpus: Stack) -> None:
    response = api.post(
        "/v1/curations",
        json={
            "sql": "SELECT id, 'show-text' AS why FROM episodes",
            "name": "shown",
            "tags": ["t1"],
        },
    )
    assert response.status_code == 201, response.text
    made = response.json()
    manifest_id = made["manifest_id"]
    assert api.get(f"/v1/manifests/{manifest_id}/arrow").status_code == 200
    lines = run_quarry(corpus.paths.root, "manifests", "show", manifest_id[:9]).stdout.splitlines()
    assert lines[0] == f"manifest     {manifest_id}"
    assert "name         shown" in lines and "tags         t1" in lines
    assert "format       version 2" in lines
    assert any(line.startswith("pulls        1, last ") for line in lines)
    assert lines[lines.index("sql") + 1].startswith("  SELECT")
