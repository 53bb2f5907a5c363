"""Operating runs with real ``quarry worker`` processes: a damaged recording parks at
``decode`` without retries while its batch goes on; ``show`` and ``runs`` report progress
and failures; ``replay --from STEP`` reruns failed recordings from a step, the steps before it
read back, nothing registered twice, refused with no change for a bad step or run; a step
whose database connection broke is retried and succeeds; ``cancel`` stops what has not
finished; ``/metrics`` of the real service counts it all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from episodes.errors import ContainerError, SourceError
from episodes.foreign import file_sha256, recording_id
from episodes.ingest import ingest_synth
from pipeline.errors import PipelineError, is_retryable
from pipeline.job import PROFILES, STEPS
from pipeline.operations import RunError, cancel_run, replay_run, run_report
from pipeline.runs import wait_run
from pipeline.workflow import STEPS_APPLICATION
from quarry.settings import Settings
from service.app import create_app
from tests.fixtures.serving import served

from .conftest import TINY, Stack, good_and_damaged, wait_for

FAST_RETRY = {"QUARRY_PIPELINE__RETRY_INTERVAL_S": "0.2", "QUARRY_PIPELINE__STEP_ATTEMPTS": "3"}
RETRIED = "automatically retried"


def steps_run(stack: Stack, workflow_id: str) -> list[str]:
    return (stack.work / workflow_id.replace(":", "_") / "steps.log").read_text().split()


def quarry_json(stack: Stack, *args: str, code: int = 0) -> Any:
    done = stack.quarry(*args, "--json")
    assert done.returncode == code, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def refused(stack: Stack, *args: str) -> str:
    done = stack.quarry(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    return done.stderr


def worker_log(stack: Stack) -> str:
    return "".join(p.read_text() for p in stack.root.glob("worker-*.log"))


def test_a_damaged_recording_parks_and_the_run_reports_it(
    stack: Stack, pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    folder, good, bad, mapping = good_and_damaged(tmp_path)
    stack.env |= FAST_RETRY
    stack.start_worker()
    args = ("pipeline", "run", "--profile", "full", str(folder), "--mapping", str(mapping))
    report = quarry_json(stack, *args, "--robot", "r9", "--wait", code=2)
    run_id = report["run_id"]
    bad_wid = f"{run_id}:{recording_id(file_sha256(bad))}"
    good_id = recording_id(file_sha256(good))

    # Terminal: parked at decode on its first attempt; the batch went on to the good one.
    assert report["counts"] == {"SUCCESS": 1, "ERROR": 1}, report
    assert steps_run(stack, bad_wid) == ["fetch", "decode"]
    assert RETRIED not in worker_log(stack)

    shown = quarry_json(stack, "pipeline", "show", run_id)
    error = shown["errors"][bad_wid]
    assert (error["step"], error["error"]) == ("decode", "ContainerError"), error
    assert "truncated" in error["message"]
    assert error["episode"] == bad_wid.partition(":")[2]
    assert error["recording"].endswith(f"landing/{file_sha256(bad)}.mcap")
    assert (shown["recordings"], shown["done"], shown["finished"]) == (2, 1, True)
    assert shown["eta_s"] is None and shown["recordings_per_hour"] > 0
    steps = {s["step"]: (s["done"], s["failed"]) for s in shown["steps"]}
    assert steps == {"fetch": (2, 0), "decode": (1, 1), **{s: (1, 0) for s in STEPS[2:]}}
    (seconds,) = pg_conn.execute(
        "SELECT (end_ns - start_ns) / 1e9 FROM episodes WHERE id = %s", (good_id,)
    ).fetchone()  # type: ignore[misc]
    assert abs(shown["episode_hours_done"] - float(seconds) / 3600) < 1e-9
    text = stack.quarry("pipeline", "show", run_id).stdout
    assert text.startswith(f"{run_id}: error 1, success 1\n"), text
    assert "1/2 recordings done" in text and f"FAILED {bad_wid} at decode" in text

    (listed, *_) = quarry_json(stack, "pipeline", "runs")["runs"]
    assert listed["run_id"] == run_id and listed["profile"] == "full", listed
    assert (listed["counts"], listed["done"], listed["finished"]) == (
        {"ERROR": 1, "SUCCESS": 1},
        1,
        True,
    )
    (selection,) = pg_conn.execute(
        "SELECT selection FROM pipeline_runs WHERE run_id = %s", (run_id,)
    ).fetchone()  # type: ignore[misc]
    assert selection == {"paths": [str(folder.resolve())]}

    # Refused with nothing changed: a step it never reached, a run that does not exist.
    assert "never reached step encode" in refused(
        stack, "pipeline", "replay", run_id, "--from", "encode"
    )
    assert "no run 'run-nosuch'" in refused(
        stack, "pipeline", "replay", "run-nosuch", "--from", "decode"
    )
    for operation in (run_report, cancel_run):
        with pytest.raises(RunError, match="no run 'run-nosuch'"):
            operation(stack.dsn, "run-nosuch")
    assert pg_conn.execute("SELECT count(*) FROM pipeline_replays").fetchone() == (0,)
    assert wait_run(stack.dsn, run_id, 0).counts() == {"SUCCESS": 1, "ERROR": 1}

    # Replayed from decode: fetch's output read back, decode run again (and parks again).
    replayed = quarry_json(stack, "pipeline", "replay", run_id, "--from", "decode")
    assert [r["workflow_id"] for r in replayed["replayed"]] == [bad_wid]
    state = wait_run(stack.dsn, run_id, timeout_s=60)
    assert state.counts() == {"SUCCESS": 1, "ERROR": 1}, state
    assert steps_run(stack, bad_wid) == ["fetch", "decode", "decode"]
    shown = quarry_json(stack, "pipeline", "show", run_id)
    (kept,) = shown["replays"]
    assert (kept["workflow_id"], kept["from"], kept["step"], kept["error"]) == (
        bad_wid,
        "decode",
        "decode",
        "ContainerError",
    )
    assert pg_conn.execute("SELECT count(*) FROM episodes").fetchone() == (1,)


def test_replay_retry_cancel_and_metrics(
    stack: Stack, pg_conn: psycopg.Connection[Any], pg_dsn: str, tmp_path: Path
) -> None:
    before = ingest_synth(
        pg_conn, stack.objects, 3, seed=5, config=TINY, workers=1, pipeline_version=0
    )
    ids = [r.episode_id for r in before]
    fail, pause = stack.root / "fail", stack.root / "pause"
    fail.touch()
    stack.env |= FAST_RETRY
    debug = ("--fail-before", "encode", "--fail-file", str(fail))
    stack.start_worker(*debug, "--pause-before", "register", "--pause-file", str(pause))

    # An injected terminal failure at encode parks both recordings of the batch.
    episodes = [arg for eid in ids[:2] for arg in ("--episode", eid)]
    report = quarry_json(
        stack, "pipeline", "run", "--profile", "reprocess", *episodes, "--wait", code=2
    )
    run_id = report["run_id"]
    wids = [f"{run_id}:{eid}" for eid in ids[:2]]
    assert report["counts"] == {"ERROR": 2}, report
    assert {e["step"] for e in report["errors"].values()} == {"encode"}

    # Fixed, replayed from encode: fetch, decode and transform read back, one new version each.
    fail.unlink()
    quarry_json(stack, "pipeline", "replay", run_id, "--from", "encode")
    state = wait_run(stack.dsn, run_id, timeout_s=60)
    assert state.counts() == {"SUCCESS": 2}, state
    for wid in wids:
        assert steps_run(stack, wid) == ["fetch", "decode", "transform", "encode", *STEPS[3:]]
    # Again from register, given by episode: register changes nothing the second time.
    quarry_json(stack, "pipeline", "replay", run_id, "--from", "register", "--episode", ids[0])
    assert wait_run(stack.dsn, run_id, timeout_s=60).counts() == {"SUCCESS": 2}
    assert steps_run(stack, wids[0])[-2:] == ["register", "register"]
    versions = pg_conn.execute(
        "SELECT episode_id::text, count(*) FROM episode_containers GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert versions == sorted([(ids[0], 2), (ids[1], 2), (ids[2], 1)])
    shown = quarry_json(stack, "pipeline", "show", run_id)
    assert [r["from"] for r in shown["replays"]] == ["encode", "encode", "register"]
    assert (shown["done"], shown["errors"]) == (2, {})

    # Retryable but failing every time: tried step_attempts times, with back-off, then parked.
    fail.write_text("retryable")
    report = quarry_json(
        stack, "pipeline", "run", "--profile", "reprocess", "--episode", ids[2], "--wait", code=2
    )
    (error,) = report["errors"].values()
    assert (error["step"], error["error"]) == ("encode", "PipelineError"), error
    assert error["message"].endswith("(after 3 attempts)"), error
    wid = f"{report['run_id']}:{ids[2]}"
    assert steps_run(stack, wid) == ["fetch", "decode", "transform", *["encode"] * 3]
    fail.unlink()

    # A step not in the profile is refused.
    pause.touch()  # before the run: its recording waits at register
    metadata = quarry_json(stack, "pipeline", "run", "--profile", "metadata", "--episode", ids[2])
    assert "not one of profile metadata's" in refused(
        stack, "pipeline", "replay", metadata["run_id"], "--from", "encode"
    )

    # Retryable: the steps' connection broken while the step waits; register retried, done.
    meta_wid = f"{metadata['run_id']}:{ids[2]}"
    wait_for(stack.work / meta_wid.replace(":", "_") / "paused-register", 60)
    with psycopg.connect(stack.dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (STEPS_APPLICATION,),
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    pause.unlink()
    assert wait_run(stack.dsn, metadata["run_id"], 60).counts() == {"SUCCESS": 1}
    assert steps_run(stack, meta_wid) == [*PROFILES["metadata"], "register"]
    assert RETRIED in worker_log(stack)

    # Cancel: three one-recording batches, the first held at register; all cancelled.
    pause.touch()
    stack.env["QUARRY_PIPELINE__BATCH_EPISODES"] = "1"
    held = quarry_json(
        stack,
        "pipeline",
        "run",
        "--profile",
        "relabel",
        *[a for e in ids for a in ("--episode", e)],
    )
    held_id = held["run_id"]
    wait_for(stack.work / held["workflows"][0].replace(":", "_") / "paused-register", 60)
    # /metrics while it is held: the totals of every run, the progress of the unfinished one.
    metrics = scrape(tmp_path, pg_dsn)
    assert metrics[("quarry_pipeline_up", ())] == 1
    recordings = {
        state: metrics[("quarry_pipeline_workflows", (("kind", "recording"), ("state", state)))]
        for state in ("SUCCESS", "PENDING", "ERROR")
    }
    assert recordings == {"SUCCESS": 3, "PENDING": 1, "ERROR": 1}, metrics
    assert metrics[("quarry_pipeline_episodes_done", ())] == 3
    total = pg_conn.execute("SELECT sum(end_ns - start_ns) / 3.6e12 FROM episodes").fetchone()
    assert total is not None
    hours = total[0]
    assert abs(metrics[("quarry_pipeline_episode_hours_done", ())] - float(hours)) < 1e-9
    run = (("run", held_id),)
    assert metrics[("quarry_pipeline_run_recordings", run)] == 3
    assert metrics[("quarry_pipeline_run_recordings_done", run)] == 0
    assert ("quarry_pipeline_run_recordings", (("run", run_id),)) not in metrics  # finished

    cancelled = quarry_json(stack, "pipeline", "cancel", held_id)["cancelled"]
    assert len(cancelled) == 4, cancelled  # three batches, the held recording
    pause.unlink()
    state = wait_run(stack.dsn, held_id, 30)
    assert state.counts() == {"CANCELLED": 3} and state.finished, state
    assert cancel_run(stack.dsn, held_id) == []  # nothing left to cancel
    assert run_report(stack.dsn, held_id).to_dict()["counts"] == {"CANCELLED": 3}

    # Replayed: the held one from its start, the two its batches never reached enqueued anew.
    plan = replay_run(stack.dsn, held_id, "fetch")
    assert sorted(p["workflow_id"] for p in plan) == sorted(held["workflows"])
    assert wait_run(stack.dsn, held_id, 60).counts() == {"SUCCESS": 3}


def test_which_errors_are_retried() -> None:
    retried = [
        psycopg.OperationalError("server closed the connection"),
        psycopg.errors.SerializationFailure("could not serialize"),
        OSError("connection reset"),
        TimeoutError("read timed out"),
        SourceError("read failed"),
        PipelineError("flaky", retryable=True),
    ]
    terminal = [
        ContainerError("truncated"),
        SourceError("no such recording", retryable=False),
        FileNotFoundError("gone"),
        PermissionError("denied"),
        PipelineError("bad"),
        psycopg.errors.CheckViolation("bad row"),
        ValueError("bug"),
    ]
    assert [is_retryable(e) for e in retried] == [True] * len(retried)
    assert [is_retryable(e) for e in terminal] == [False] * len(terminal)


def scrape(tmp_path: Path, dsn: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` of the real service over ``dsn``: each sample by name and labels."""
    settings = Settings(state_dir=tmp_path / "service-state", source_dsn=SecretStr(dsn))
    with served(create_app(settings.service_settings())) as url:
        text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("quarry_pipeline")
    }


def test_metrics_before_any_run(tmp_path: Path, pg_dsn: str) -> None:
    metrics = scrape(tmp_path, pg_dsn)
    assert metrics[("quarry_pipeline_up", ())] == 1
    assert metrics[("quarry_pipeline_episodes_done", ())] == 0
    assert metrics[("quarry_pipeline_workflows", (("kind", "batch"), ("state", "PENDING")))] == 0
