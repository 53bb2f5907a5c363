"""The loop closed on a stack of its own: a manifest is curated, a checkpoint records it as
its training manifest, the checkpoint's evaluation results go in with ``pipeline run
--profile relabel --labels`` (run by the worker ``quarry up`` started), CDC carries them to
the warehouse, and a curation over HTTP of "the failures of checkpoint X"
(sql/curations/failures_of_checkpoint.sql) holds exactly the episodes it failed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from quarry.settings import SQL_ROOT
from tests.fixtures.stack import run_json, run_quarry, state
from trainer.marker import COMMIT_NAME, MANIFEST_KEY

__all__ = ["state"]

CHECKPOINT = "pick-v1/step-0000000008"


def sql_rows(state_dir: Path, sql: str) -> list[list[object]]:
    done = run_quarry(state_dir, "sql", sql, "--format", "json")
    return list(json.loads(done.stdout)["rows"])


@pytest.mark.slow
def test_failures_of_a_checkpoint_are_one_curation(state: Path) -> None:
    run_quarry(state, "up", timeout=300)
    try:
        run_quarry(state, "ingest", "synth", "--episodes", "3", "--seed", "23", "--workers", "1")
        deadline = time.monotonic() + 60
        while len(ids := sql_rows(state, "SELECT id FROM episodes ORDER BY id")) < 3:
            assert time.monotonic() < deadline, "CDC never carried the episodes"
            time.sleep(0.3)
        (first, second, third) = (str(row[0]) for row in ids)
        trained_on = run_json(state, "curate", "--sql", "SELECT * FROM episodes")["manifest_id"]

        folder = state / "checkpoints" / CHECKPOINT  # as the trainer commits one
        folder.mkdir(parents=True)
        (folder / ".metadata").write_bytes(b"")
        (folder / COMMIT_NAME).write_text(json.dumps({"step": 8, MANIFEST_KEY: trained_on}))
        results = state.parent / "eval.jsonl"
        lines = [
            {"episode": first, "checkpoint": str(folder), "success": False, "scores": {"p": 0.1}},
            {"episode": second, "checkpoint": CHECKPOINT, "success": True, "scores": {"p": 1}},
            {"episode": third, "checkpoint": CHECKPOINT, "success": False},
        ]
        results.write_text("".join(json.dumps(line) + "\n" for line in lines))
        args = ("pipeline", "run", "--profile", "relabel", "--labels", str(results), "--wait")
        done = run_json(state, *args)
        assert done["counts"] == {"SUCCESS": 3}, done

        status = run_json(state, "status")
        token = (state / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=status["service_url"], headers=headers, timeout=60) as api:
            count = {"sql": "SELECT count(*) AS n FROM episode_evaluations"}
            deadline = time.monotonic() + 60
            while api.post("/v1/sql", json=count).raise_for_status().json()["rows"] != [[3]]:
                assert time.monotonic() < deadline, "CDC never carried the evaluations"
                time.sleep(0.3)
            example = (SQL_ROOT / "curations" / "failures_of_checkpoint.sql").read_text()
            body = {"sql": example, "params": {"checkpoint_id": CHECKPOINT}}
            made = api.post("/v1/curations", json=body)
            assert made.status_code == 201, made.text
            manifest = made.json()["manifest_id"]
            arrow = api.get(f"/v1/manifests/{manifest}/arrow").raise_for_status().content
        table = pa.ipc.open_file(pa.py_buffer(arrow)).read_all()
        assert sorted(set(table["episode_id"].to_pylist())) == sorted([first, third])
        assert set(table["trained_on"].to_pylist()) == {trained_on}
        labels = sql_rows(
            state,
            "SELECT episode_id, value FROM episode_labels WHERE key = 'evaluation.success'"
            f" AND author = 'evaluation:{CHECKPOINT}' ORDER BY episode_id",
        )
        assert labels == [[first, "false"], [second, "true"], [third, "false"]]
    finally:
        run_quarry(state, "down", check=False, timeout=120)
