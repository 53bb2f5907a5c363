"""A run goes out in bin-packed batches, one batch workflow each, that run the recordings'
child workflows ``<run>:<episode>``: enqueueing the run twice runs each recording once, the
run's state counts the recordings no batch has reached yet, and the queue's limits are the
settings'."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from episodes.ingest import ingest_synth
from episodes.versions import source_of
from pipeline.config import PipelineConfig
from pipeline.errors import ProfileError
from pipeline.job import Job
from pipeline.runs import client, enqueue_run, new_run_id, plan_batches, run_state, wait_run

from .conftest import TINY, Stack


def test_batches_run_each_recording_once(stack: Stack, pg_conn: psycopg.Connection[Any]) -> None:
    before = ingest_synth(
        pg_conn, stack.objects, 3, seed=11, config=TINY, workers=1, pipeline_version=0
    )
    run_id = new_run_id()
    jobs = []
    for record in before:
        source = source_of(pg_conn, record.episode_id)
        assert source is not None
        jobs.append(Job(run_id, "reprocess", source, 1))
    assert [len(b) for b in plan_batches(jobs, 2)] == [2, 1]
    with pytest.raises(ProfileError, match="twice"):
        plan_batches([jobs[0], jobs[0]], 2)
    ids = enqueue_run(stack.dsn, jobs, batch_episodes=2)
    assert sorted(ids) == sorted(job.workflow_id for job in jobs)
    assert enqueue_run(stack.dsn, jobs, batch_episodes=2) == ids  # attaches, runs once
    waiting = run_state(stack.dsn, run_id)
    assert waiting.counts() == {"ENQUEUED": 3} and not waiting.finished, waiting

    stack.start_worker()
    state = wait_run(stack.dsn, run_id, timeout_s=90)
    assert state.counts() == {"SUCCESS": 3}, state
    dbos = client(stack.dsn)
    try:
        batches = dbos.list_workflows(workflow_id_prefix=f"{run_id}/")
        children = dbos.list_workflows(workflow_id_prefix=f"{run_id}:")
    finally:
        dbos.destroy()
    assert sorted(b.workflow_id for b in batches) == [f"{run_id}/batch-0", f"{run_id}/batch-1"]
    assert {c.parent_workflow_id for c in children} == {b.workflow_id for b in batches}
    rows = pg_conn.execute(
        "SELECT episode_id, count(*) FROM episode_containers WHERE pipeline_version = 1"
        " GROUP BY episode_id"
    ).fetchall()
    assert sorted(n for _, n in rows) == [1, 1, 1]


def test_queue_limits_come_from_the_settings() -> None:
    assert PipelineConfig().queue_options() == {
        "worker_concurrency": 1,
        "polling_interval_sec": 0.2,
        "limiter": {"limit": 20, "period": 1.0},
    }
    limited = PipelineConfig(queue_concurrency=4, starts_per_period=None, worker_concurrency=2)
    assert limited.queue_options() == {
        "worker_concurrency": 2,
        "polling_interval_sec": 0.2,
        "concurrency": 4,
    }
    for bad in ({"batch_episodes": 0}, {"start_period_s": 0}, {"starts_per_period": 0}):
        with pytest.raises(ValidationError):
            PipelineConfig.model_validate(bad)
