"""A worker SIGKILLed in the middle of a step resumes there on restart: the finished steps
are not redone and nothing is registered twice."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import psycopg

from episodes.ingest import ingest_synth
from pipeline.job import STEPS
from pipeline.runs import wait_run

from .conftest import TINY, Stack, wait_for


def steps_run(folder: Path) -> list[str]:
    return (folder / "steps.log").read_text().split()


def test_killed_worker_resumes_at_its_step(stack: Stack, pg_conn: psycopg.Connection[Any]) -> None:
    before = ingest_synth(
        pg_conn, stack.objects, 2, seed=3, config=TINY, workers=1, pipeline_version=0
    )
    ids = [r.episode_id for r in before]
    pause = stack.root / "pause"
    pause.touch()
    done = stack.quarry(
        "pipeline",
        "run",
        "--profile",
        "reprocess",
        "--json",
        *[arg for eid in ids for arg in ("--episode", eid)],
    )
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]

    worker = stack.start_worker("--pause-before", "encode", "--pause-file", str(pause))
    first = stack.work / f"{run_id}_{ids[0]}"
    wait_for(first / "paused-encode", 60)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert steps_run(first) == ["fetch", "decode", "transform", "encode"]
    assert {"decoded.pkl", "episode.pkl"} <= {p.name for p in first.iterdir()}

    pause.unlink()
    stack.start_worker()
    state = wait_run(stack.dsn, run_id, timeout_s=90)
    assert state.counts() == {"SUCCESS": 2}, state
    # The killed step ran again, from its start; the finished ones were read back.
    assert steps_run(first) == ["fetch", "decode", "transform", "encode", *STEPS[3:]]
    assert steps_run(stack.work / f"{run_id}_{ids[1]}") == list(STEPS)
    # Registered: the bulky step files are gone, the log and the pause marker stay.
    for eid in ids:
        left = {p.name for p in (stack.work / f"{run_id}_{eid}").iterdir()}
        assert left <= {"steps.log", "paused-encode"}, left

    rows = pg_conn.execute(
        "SELECT e.id::text, e.pipeline_version, e.uri, count(c.*),"
        " count(*) FILTER (WHERE c.superseded_at IS NULL)"
        " FROM episodes e JOIN episode_containers c ON c.episode_id = e.id"
        " GROUP BY e.id ORDER BY e.id"
    ).fetchall()
    old = {r.episode_id: r.uri for r in before}
    assert len(rows) == 2
    for eid, version, uri, versions, current in rows:
        assert (version, versions, current) == (1, 2, 1)
        assert uri != old[eid]
        assert Path(old[eid].removeprefix("file://")).is_file()  # kept for old manifests
        assert Path(uri.removeprefix("file://")).is_file()
    labels = pg_conn.execute(
        "SELECT episode_id::text, count(*) FROM episode_labels WHERE key = 'outcome'"
        " GROUP BY episode_id"
    ).fetchall()
    assert sorted(labels) == sorted((eid, 1) for eid in ids)
    assert time.monotonic() > 0
