"""Evaluation results (``pipeline run --profile relabel --labels FILE``): a bad results file
is refused whole, naming each bad line and field, with nothing enqueued or written; unknown
episodes, unknown checkpoints, checkpoints without a manifest (or with an unregistered one)
too; a good file becomes labels and ``episode_evaluations`` rows through the relabel
workflows, episodes named by ID or by their rollout recording, and running it again changes
nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from episodes.foreign import file_sha256, ingest_recording, recording_id
from episodes.ingest import ingest_synth
from episodes.mapping import mapping_from_dict
from pipeline.engine import SYSTEM_SCHEMA
from pipeline.evaluation import AUTHOR_PREFIX, ResultsError, parse_results
from tests.episodes.foreign_files import ROS2_MAPPING, source_episode, write_ros2
from trainer.marker import COMMIT_NAME

from .conftest import TINY, Stack

MANIFEST = "ab" * 32


def checkpoint(root: Path, run: str, step: int, **info: Any) -> Path:
    """A checkpoint folder as the trainer leaves it: its commit marker (``info``) last."""
    folder = root / "checkpoints" / run / f"step-{step:010d}"
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"")
    if info:
        (folder / COMMIT_NAME).write_text(json.dumps({"step": step, **info}))
    return folder


def register_manifest(conn: psycopg.Connection[Any], manifest_id: str) -> None:
    conn.execute(
        "INSERT INTO manifests (id, reuse_key, sql, sample_spec, snapshot_id, cdc_position,"
        " rows, samples, size_bytes, uri, author) VALUES (%s, '', 'SELECT * FROM episodes',"
        " %s, 1, '{}', 1, 1, 1, 'file:///m.arrow', 'test')",
        (manifest_id, Jsonb({})),
    )


def write_lines(path: Path, *records: Any) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def nothing_enqueued(conn: psycopg.Connection[Any]) -> bool:
    found = conn.execute("SELECT to_regclass(%s)", (f"{SYSTEM_SCHEMA}.workflow_status",))
    if found.fetchone() == (None,):
        return True
    rows = conn.execute(f"SELECT count(*) FROM {SYSTEM_SCHEMA}.workflow_status").fetchone()
    return rows == (0,)


def test_results_lines_are_checked_field_by_field() -> None:
    record = {"episode": str(uuid.uuid4()), "checkpoint": "r/step-0000000001", "success": False}
    good = json.dumps(record)
    text = "\n".join(
        [
            good,
            "",
            "not json",
            '{"checkpoint": "r/step-0000000001", "success": true}',
            '{"episode": "x", "recording": "a.mcap", "checkpoint": "", "success": "yes"}',
            good.replace("}", ', "scores": {"progress": "high", "t": NaN}, "sucess": 1}'),
            "[1, 2]",
        ]
    )
    with pytest.raises(ResultsError) as caught:
        parse_results(text, file="r.jsonl")
    message = str(caught.value)
    assert "nothing written" in message and "line 1:" not in message
    for expected in (
        "line 3: not JSON (Expecting value at column 1)",
        "line 4: field 'episode' or 'recording': give exactly one",
        "line 5: field 'episode' or 'recording'",
        "line 5: field 'checkpoint'",
        "line 5: field 'success': expected true or false, got 'yes'",
        "line 6: not a JSON object (NaN",
        "line 7: not a JSON object",
    ):
        assert expected in message, (expected, message)
    fixed = good.replace("}", ', "scores": {"progress": "high"}, "sucess": 1}')
    with pytest.raises(ResultsError) as caught:
        parse_results(fixed)
    assert "line 1: field 'sucess': unknown field" in str(caught.value)
    assert "line 1: field 'scores.progress': expected a number" in str(caught.value)
    (line,) = parse_results(good.replace("}", ', "scores": {"progress": 0.25, "n": 3}}'))
    assert (line.success, line.scores) == (False, {"progress": 0.25, "n": 3})


def test_results_become_labels_and_evaluations(
    stack: Stack, pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    first, second = ingest_synth(pg_conn, stack.objects, 2, seed=41, config=TINY, workers=1)
    rollout = write_ros2(tmp_path / "rollout.mcap", source_episode(seed=5))
    mapping = mapping_from_dict(ROS2_MAPPING)
    ingest_recording(pg_conn, stack.objects, rollout, mapping)
    rollout_id = recording_id(file_sha256(rollout))
    register_manifest(pg_conn, MANIFEST)
    good = checkpoint(stack.root, "pick-v1", 40, manifest_id=MANIFEST)
    checkpoint(stack.root, "old-run", 10, wall=1.0)  # saved before markers named a manifest
    checkpoint(stack.root, "crashed", 20)  # partial: no marker
    checkpoint(stack.root, "elsewhere", 30, manifest_id="cd" * 32)  # not registered here

    bad = write_lines(
        tmp_path / "bad.jsonl",
        {"episode": first.episode_id, "checkpoint": "pick-v1/step-0000000040", "success": True},
        {"episode": str(uuid.uuid4()), "checkpoint": str(good), "success": False},
        {"episode": first.episode_id, "checkpoint": "nope/step-0000000001", "success": False},
        {"episode": first.episode_id, "checkpoint": "old-run/step-0000000010", "success": True},
        {"episode": first.episode_id, "checkpoint": "crashed/step-0000000020", "success": True},
        {"episode": first.episode_id, "checkpoint": "elsewhere/step-0000000030", "success": True},
        {"recording": "missing.mcap", "checkpoint": str(good), "success": True},
        {"episode": first.episode_id, "checkpoint": str(good), "success": False},
        {"episode": first.episode_id, "checkpoint": "../x", "success": False},
    )
    refused = stack.quarry("pipeline", "run", "--profile", "relabel", "--labels", str(bad))
    assert refused.returncode == 2, refused.stderr
    for expected in (
        "line 2: field 'episode': no such episode",
        "line 3: field 'checkpoint': unknown checkpoint 'nope/step-0000000001'",
        "line 4: field 'checkpoint': checkpoint old-run/step-0000000010 records no training",
        "line 5: field 'checkpoint':",
        "not a complete checkpoint",
        "line 6: field 'checkpoint': checkpoint elsewhere/step-0000000030 was trained on",
        f"line 7: field 'recording': no file {tmp_path / 'missing.mcap'}",
        "line 8: episode",
        "on line 1 already",
        "line 9: field 'checkpoint': unknown checkpoint '../x'",
    ):
        assert expected in refused.stderr, (expected, refused.stderr)
    assert "line 1:" not in refused.stderr
    assert nothing_enqueued(pg_conn)
    assert pg_conn.execute("SELECT count(*) FROM episode_evaluations").fetchone() == (0,)
    other = stack.quarry("pipeline", "run", "--profile", "metadata", "--labels", str(bad))
    assert other.returncode == 2 and "--profile relabel" in other.stderr, other.stderr

    results = write_lines(
        tmp_path / "eval.jsonl",
        {
            "episode": first.episode_id,
            "checkpoint": "pick-v1/step-0000000040",
            "success": False,
            "scores": {"progress": 0.25, "time_s": 12},
        },
        {"episode": second.episode_id, "checkpoint": str(good), "success": True},
        {"recording": "rollout.mcap", "checkpoint": str(good), "success": False},
    )
    stack.start_worker()
    args = ("pipeline", "run", "--profile", "relabel", "--labels", str(results), "--wait")
    done = stack.quarry(*args, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"] == {"SUCCESS": 3}, done.stdout
    query = (
        "SELECT episode_id::text, checkpoint_id, manifest_id, success, scores FROM"
        " episode_evaluations ORDER BY episode_id"
    )
    expected = sorted(
        [
            (
                first.episode_id,
                "pick-v1/step-0000000040",
                MANIFEST,
                False,
                {"progress": 0.25, "time_s": 12},
            ),
            (second.episode_id, "pick-v1/step-0000000040", MANIFEST, True, {}),
            (rollout_id, "pick-v1/step-0000000040", MANIFEST, False, {}),
        ]
    )
    assert pg_conn.execute(query).fetchall() == expected
    labels = (
        "SELECT episode_id::text, key, value FROM episode_labels WHERE author = %s ORDER BY 1, 2"
    )
    author = AUTHOR_PREFIX + "pick-v1/step-0000000040"
    before = pg_conn.execute(labels, (author,)).fetchall()
    assert (first.episode_id, "evaluation.score.progress", "0.25") in before
    assert (first.episode_id, "evaluation.success", "false") in before
    assert (rollout_id, "evaluation.success", "false") in before
    assert len(before) == 5

    again = stack.quarry(*args, "--json")  # the same results again: the same rows
    assert again.returncode == 0, again.stderr
    assert pg_conn.execute(query).fetchall() == expected
    assert pg_conn.execute(labels, (author,)).fetchall() == before
