"""notebooks/explore_corpus.ipynb, executed in a real kernel against the live session stack."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nbclient.exceptions import CellExecutionError
from nbformat import NotebookNode

from quarry.stack.lifecycle import Stack
from tests.fixtures.postgres import private_folder
from tests.notebooks.kernel import (
    append_probe,
    cell_outputs,
    execute,
    inject_parameters,
    parameters,
    probe_output,
    read_notebook,
)
from warehouse.ducklake.backend import DuckLakeWarehouse

NOTEBOOK = "explore_corpus.ipynb"
FULL_PROBE = """{
    "state_dir": str(find_state_dir()), "snapshot": SNAPSHOT,
    "episodes": int(overview.episodes[0]), "hours": float(overview.hours[0]),
    "hours_table": float(hours.hours.sum()), "stamp_episodes": int(stamps.episodes.sum()),
    "flags": dict(zip(flag_rates.flag, flag_rates.episodes.astype(int))),
    "preview": totals, "curation": curation,
    "manifest_rows": manifest.num_rows, "manifest_samples": manifest.num_samples,
    "matches_preview": bool(check.matches.all()), "digest": digest,
}"""
CONNECT_PROBE = '{"service_url": service_url, "token": token, "snapshot": SNAPSHOT}'


@pytest.fixture
def scratch() -> Iterator[Path]:
    with private_folder("quarry-test-notebook-") as folder:
        yield folder


def service_of(stack: Stack) -> tuple[str, str]:
    url = stack.status().service_url
    assert url is not None
    return url, stack.paths.admin_token.read_text().strip()


def connect_only(notebook: NotebookNode) -> NotebookNode:
    """The notebook up to its Connect cell (parameters and connection, no analysis)."""
    end = next(i for i, c in enumerate(notebook.cells) if "SNAPSHOT = " in c.source)
    notebook.cells = notebook.cells[: end + 1]
    return notebook


def read_at(stack: Stack, snapshot: int, sql: str) -> Any:
    """The first row of ``sql`` at ``snapshot``, read past the service, from the lake."""
    with DuckLakeWarehouse(stack.settings.warehouse_config()) as warehouse:
        return warehouse.query_arrow(sql, snapshot_id=snapshot).to_pylist()[0]


def test_committed_notebook_has_no_outputs() -> None:
    notebook = read_notebook(NOTEBOOK)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, "the notebook has code cells"
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert not any("execution" in cell.metadata for cell in code)
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1


@pytest.mark.slow
def test_notebook_explores_the_live_stack(corpus: Stack, scratch: Path) -> None:
    # As a user runs it: Jupyter started in notebooks/ of a checkout whose .quarry/ is the
    # stack's state folder; nothing configured.
    checkout = scratch / "checkout"
    (checkout / "notebooks").mkdir(parents=True)
    (checkout / ".quarry").symlink_to(corpus.paths.root, target_is_directory=True)
    notebook = read_notebook(NOTEBOOK)
    append_probe(notebook, FULL_PROBE)
    execute(notebook, scratch, checkout / "notebooks", {})
    seen = probe_output(notebook)

    assert Path(seen["state_dir"]).resolve() == corpus.paths.root
    expected = read_at(
        corpus,
        seen["snapshot"],
        "SELECT count(*) AS n, sum(duration_s) / 3600 AS hours FROM episodes",
    )
    assert seen["episodes"] == seen["stamp_episodes"] == expected["n"] > 0
    assert seen["hours"] == pytest.approx(expected["hours"]) == pytest.approx(seen["hours_table"])
    flags = read_at(
        corpus,
        seen["snapshot"],
        "SELECT map(list(flag), list(n)) AS m FROM "
        "(SELECT flag, count(*) AS n FROM episode_quality_flags GROUP BY flag)",
    )
    assert seen["flags"] == dict(flags["m"] or {})
    _assert_manifest_is_the_draft(corpus, seen)
    _assert_every_plot_was_drawn(notebook)


def _assert_manifest_is_the_draft(stack: Stack, seen: dict[str, Any]) -> None:
    draft = parameters(read_notebook(NOTEBOOK))["DRAFT_SQL"]
    drafted = read_at(stack, seen["snapshot"], f"SELECT count(*) AS n FROM ({draft})")["n"]
    curation, preview = seen["curation"], seen["preview"]
    assert preview["episodes"] == drafted == curation["rows"] == seen["manifest_rows"]
    assert drafted > 0, "the test corpus has successful, unflagged episodes"
    assert seen["matches_preview"]
    assert preview["samples"] == curation["samples"] == seen["manifest_samples"] > 0
    served = stack.paths.manifests / f"{curation['manifest_id']}.arrow"
    assert (
        seen["digest"] == curation["manifest_id"] == hashlib.sha256(served.read_bytes()).hexdigest()
    )


def _assert_every_plot_was_drawn(notebook: NotebookNode) -> None:
    plotting = [c for c in notebook.cells if c.cell_type == "code" and "\nshow(fig)" in c.source]
    assert len(plotting) >= 5
    for cell in plotting:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(images) == 1, cell.source[:80]
    tables = cell_outputs(notebook, "flag_rates = sql(")
    assert any("text/html" in o.get("data", {}) for o in tables), "a table is rendered"


@pytest.mark.parametrize("how", ["environment", "parameters"])
def test_notebook_is_pointed_at_a_stack(corpus: Stack, scratch: Path, how: str) -> None:
    # The environment names the service itself (as for a remote one); the parameters cell
    # names only the state folder, where `quarry up` wrote the URL and the token.
    url, token = service_of(corpus)
    notebook = connect_only(read_notebook(NOTEBOOK))
    env: dict[str, str] = {}
    if how == "environment":
        env = {"QUARRY_SERVICE_URL": url, "QUARRY_TOKEN": token}
    else:
        inject_parameters(notebook, f"STATE_DIR = {str(corpus.paths.root)!r}")
    append_probe(notebook, CONNECT_PROBE)
    execute(notebook, scratch, scratch, env)
    seen = probe_output(notebook)
    assert (seen["service_url"], seen["token"]) == (url, token)
    assert seen["snapshot"] >= 1


def test_notebook_says_how_to_find_a_stack(scratch: Path) -> None:
    notebook = connect_only(read_notebook(NOTEBOOK))
    with pytest.raises(CellExecutionError, match=r"no \.quarry/ state folder"):
        execute(notebook, scratch, scratch, {})


def test_notebook_shows_what_the_service_refused(corpus: Stack, scratch: Path) -> None:
    url, token = service_of(corpus)
    notebook = connect_only(read_notebook(NOTEBOOK))
    append_probe(notebook, "{'rows': len(sql('SELECT * FROM mirror.episodes'))}")
    with pytest.raises(CellExecutionError, match=r"400 .*refused"):
        execute(notebook, scratch, scratch, {"QUARRY_SERVICE_URL": url, "QUARRY_TOKEN": token})
