"""``quarry pipeline watch``: each settled recording in the landing folder starts a run of its
own, ID ``watch-<episode>``; dotfiles and ``*.partial`` are never taken; a damaged recording
fails its own run and the others go on; a second watch over the same folder starts nothing;
a long-running watch takes a file that arrives while it runs, only once it is whole."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from episodes.foreign import file_sha256, recording_id
from pipeline.runs import RunState, run_state
from tests.episodes.foreign_files import ROS2_MAPPING, source_episode, write_ros2

from .conftest import Stack


def finished(stack: Stack, run_id: str, timeout_s: float = 90) -> RunState:
    """The run's state once it finished (it may not have been enqueued yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = run_state(stack.dsn, run_id)
        if state.statuses and state.finished:
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.2)


def watch_once(stack: Stack, folder: Path, mapping: Path) -> list[dict[str, Any]]:
    args = ("pipeline", "watch", str(folder), "--mapping", str(mapping), "--once")
    done = stack.quarry(*args, "--settle", "0.2", "--poll", "0.1", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_watch_once_takes_each_recording_once(
    stack: Stack, pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    folder = tmp_path / "landing"
    (folder / "robot-2").mkdir(parents=True)
    good = write_ros2(folder / "robot-2" / "good.mcap", source_episode(seed=3))
    bad = folder / "bad.mcap"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 3])  # cut: no footer
    (folder / ".hidden.mcap").write_bytes(good.read_bytes())
    (folder / "late.mcap.partial").write_bytes(good.read_bytes()[:100])
    (folder / "notes.txt").write_text("not a recording")
    mapping = tmp_path / "ros2.json"
    mapping.write_text(json.dumps(ROS2_MAPPING))
    good_id, bad_id = (recording_id(file_sha256(p)) for p in (good, bad))

    stack.start_worker()
    taken = watch_once(stack, folder, mapping)
    assert [(t["file"], t["status"], t["run_id"]) for t in taken] == [
        (str(bad), "started", f"watch-{bad_id}"),
        (str(good), "started", f"watch-{good_id}"),
    ]
    parked = finished(stack, f"watch-{bad_id}")
    assert parked.counts() == {"ERROR": 1}, parked
    assert [e["step"] for e in parked.errors.values()] == ["decode"]
    assert finished(stack, f"watch-{good_id}").counts() == {"SUCCESS": 1}

    again = watch_once(stack, folder, mapping)  # a restart: nothing is started twice
    assert [(t["file"], t["status"]) for t in again] == [
        (str(bad), "already"),
        (str(good), "already"),
    ]
    ids = pg_conn.execute("SELECT id::text FROM episodes").fetchall()
    assert ids == [(good_id,)]
    count = (
        "SELECT count(*) FROM quarry_pipeline.workflow_status WHERE workflow_uuid LIKE 'watch-%'"
    )
    assert pg_conn.execute(count).fetchone() == (4,)  # a batch and a recording per run

    refused = stack.quarry("pipeline", "watch", str(folder), "--once")
    assert refused.returncode == 2 and "no robot given" in refused.stderr, refused.stderr


def test_watch_takes_a_file_that_arrives_once_it_is_whole(
    stack: Stack, pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    folder = tmp_path / "landing"
    folder.mkdir()
    mapping = tmp_path / "ros2.json"
    mapping.write_text(json.dumps(ROS2_MAPPING))
    whole = write_ros2(tmp_path / "source.mcap", source_episode(seed=6)).read_bytes()
    stack.start_worker()
    args = ["pipeline", "watch", str(folder), "--mapping", str(mapping), "--json"]
    log = (tmp_path / "watch.out").open("w+")
    watcher = subprocess.Popen(
        [sys.executable, "-m", "quarry", *args, "--settle", "0.6", "--poll", "0.1"],
        env=stack.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while "watching" not in (tmp_path / "watch.out").read_text():  # scanning the folder
            assert watcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        arriving = folder / "arriving.mcap"
        with arriving.open("wb") as out:  # written slowly: pauses shorter than the settle time
            step = len(whole) // 6 + 1
            for start in range(0, len(whole), step):
                out.write(whole[start : start + step])
                out.flush()
                time.sleep(0.3)
        episode = recording_id(file_sha256(arriving))
        state = finished(stack, f"watch-{episode}", timeout_s=60)
        assert state.counts() == {"SUCCESS": 1}, state
    finally:
        watcher.send_signal(signal.SIGTERM)
        code = watcher.wait(timeout=30)
    log.seek(0)
    lines = [json.loads(line) for line in log.read().splitlines() if line.startswith("{")]
    assert code == 0
    assert [(t["file"], t["status"], t["episode_id"]) for t in lines] == [
        (str(arriving), "started", episode)
    ]
    assert pg_conn.execute("SELECT id::text FROM episodes").fetchall() == [(episode,)]
