"""The whole path on a stack of its own: stale episodes (ingested with an old
``--pipeline-version``) are selected with ``--where`` through the curation guard, reprocessed
from their sources by the worker ``quarry up`` started (none by hand), and CDC carries the
new versions into the warehouse; a manifest built before still rebuilds byte-identical, a new
curation sees the new versions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fixtures.stack import run_json, run_quarry, state

__all__ = ["state"]


def stale_count(state_dir: Path, version: int) -> int:
    sql = f"SELECT count(*) AS n FROM episodes WHERE pipeline_version = {version}"
    done = run_quarry(state_dir, "sql", sql, "--format", "json")
    return int(json.loads(done.stdout)["rows"][0][0])


def wait_count(state_dir: Path, version: int, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while stale_count(state_dir, version) != count:
        assert time.monotonic() < deadline, f"warehouse never showed {count} at v{version}"
        time.sleep(0.5)


@pytest.mark.slow
def test_reprocess_stale_episodes_keeps_old_manifests(state: Path) -> None:
    run_quarry(state, "up", timeout=300)
    try:
        run_quarry(
            state,
            "ingest",
            "synth",
            "--episodes",
            "2",
            "--seed",
            "21",
            "--pipeline-version",
            "1",
            "--workers",
            "1",
        )
        wait_count(state, 1, 2)
        old = run_json(state, "curate", "--sql", "SELECT * FROM episodes")["manifest_id"]

        refused = run_quarry(
            state,
            "pipeline",
            "run",
            "--profile",
            "reprocess",
            "--where",
            "id IN (SELECT id FROM read_csv('/etc/passwd'))",
            check=False,
        )
        assert refused.returncode == 2 and "refused" in refused.stderr, refused.stderr

        run = run_json(
            state,
            "pipeline",
            "run",
            "--profile",
            "reprocess",
            "--where",
            "pipeline_version < 3",
            "--pipeline-version",
            "3",
            "--wait",
        )
        assert run["counts"] == {"SUCCESS": 2} and run["failed"] == [], run
        wait_count(state, 3, 2)
        assert stale_count(state, 1) == 0

        rebuilt = run_json(state, "manifests", "rebuild", old)
        assert rebuilt["identical"], rebuilt
        new = run_json(state, "curate", "--sql", "SELECT * FROM episodes")["manifest_id"]
        assert new != old
        card = json.dumps(run_json(state, "manifests", "show", new))
        assert card  # the new manifest is registered
    finally:
        run_quarry(state, "down", check=False, timeout=120)
