"""Profile ``full``: recordings are copied into the landing area and each becomes an episode
through the workflow's steps; a recording that fails a step fails its own workflow only
(``--wait`` exits 2 naming it), and the good one is registered with its source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from episodes.foreign import file_sha256, recording_id

from .conftest import Stack, good_and_damaged


def test_full_profile_lands_and_registers_and_parks_a_bad_recording(
    stack: Stack, pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    folder, good, bad, mapping = good_and_damaged(tmp_path)
    stack.start_worker()
    args = ("pipeline", "run", "--profile", "full", str(folder), "--mapping", str(mapping))
    args += ("--robot", "r9")
    done = stack.quarry(*args, "--wait", "--json")
    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"] == {"SUCCESS": 1, "ERROR": 1}, report
    bad_id = recording_id(file_sha256(bad))
    assert report["failed"] == [f"{report['run_id']}:{bad_id}"]
    assert bad_id in done.stderr
    (error,) = report["errors"].values()
    assert (error["step"], error["error"]) == ("decode", "ContainerError"), error
    assert "truncated" in error["message"]

    good_id = recording_id(file_sha256(good))
    row = pg_conn.execute(
        "SELECT e.robot_id, s.kind, s.uri, s.sha256 FROM episodes e"
        " JOIN episode_sources s ON s.episode_id = e.id WHERE e.id = %s",
        (good_id,),
    ).fetchone()
    assert row is not None
    robot, kind, uri, sha = row
    landed = stack.objects.resolve() / "landing" / f"{sha}.mcap"
    assert (robot, kind, uri) == ("r9", "mcap", f"file://{landed}")
    assert file_sha256(landed) == file_sha256(good)
    assert pg_conn.execute("SELECT count(*) FROM episodes").fetchone() == (1,)

    shown = stack.quarry("pipeline", "show", report["run_id"], "--json")
    assert json.loads(shown.stdout)["counts"] == report["counts"], shown.stderr
