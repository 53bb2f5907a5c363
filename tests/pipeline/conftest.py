"""Pipeline tests: real workers (``quarry worker`` processes) on the session's Postgres."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from episodes.synth import FleetConfig
from tests.episodes.foreign_files import ROS2_MAPPING, source_episode, write_ros2
from tests.fixtures.postgres import pg_conn, pg_dsn, postgres

__all__ = ["pg_conn", "pg_dsn", "postgres"]

#: Short, small synthetic episodes: a workflow's steps take well under a second each.
TINY = FleetConfig(width=64, height=48, duration_s=(3.0, 3.5))


class Stack:
    """A state folder whose operational database is this test's, and its workers."""

    def __init__(self, root: Path, dsn: str) -> None:
        self.root = root
        self.dsn = dsn
        self.env = {**os.environ, "QUARRY_STATE_DIR": str(root), "QUARRY_SOURCE_DSN": dsn}
        self.workers: list[subprocess.Popen[bytes]] = []

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    @property
    def work(self) -> Path:
        return self.root / "pipeline" / "work"

    def quarry(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "quarry", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def start_worker(self, *args: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"worker-{len(self.workers)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "quarry", "worker", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(proc)
        return proc

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def stack(tmp_path: Path, pg_dsn: str) -> Iterator[Stack]:
    (tmp_path / "state" / "objects").mkdir(parents=True)
    stack = Stack(tmp_path / "state", pg_dsn)
    try:
        yield stack
    finally:
        stack.stop_workers()


def wait_for(path: Path, timeout_s: float) -> None:
    """Wait until ``path`` exists (fails the test after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.05)


def good_and_damaged(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A folder of two ROS 2 recordings, one whole and one cut to a third (no footer), and
    their mapping file: (folder, good, bad, mapping)."""
    folder = tmp_path / "recordings"
    folder.mkdir()
    good = write_ros2(folder / "good.mcap", source_episode(seed=2))
    bad = folder / "bad.mcap"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 3])  # cut: no footer
    mapping = tmp_path / "ros2.json"
    mapping.write_text(json.dumps(ROS2_MAPPING))
    return folder, good, bad, mapping
