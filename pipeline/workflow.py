"""The recording workflow on DBOS Transact: one durable workflow per (run, episode), its
steps recorded in DBOS's system database, so a worker killed mid-step resumes (on its
restart, or on another worker's recovery) at that step, with the finished steps' outputs
read back instead of redone. A step that fails for a passing reason is tried again with
back-off (:func:`_step`, the worker's :class:`~pipeline.job.StepRetry`); a terminal failure
ends the workflow at once (``ERROR``, the step and error kept), and its batch goes on.

The workflows are registered with DBOS at import (its decorators); the steps run through
``DBOS.run_step`` with the retry policy of the worker's context (where it writes, the
operational database, the retries), set by :func:`pipeline.worker.run_worker` before DBOS
launches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from dbos import DBOS, SetWorkflowID, StepOptions

from . import steps
from .errors import PipelineError, is_retryable
from .job import FROM_CONTAINER, Job, WorkerContext

R = TypeVar("R")

#: The queue every recording's workflow is enqueued on; workers dequeue from it.
QUEUE_NAME = "quarry-ingest"
#: The recording workflow's registered name (a batch runs it as a child workflow).
WORKFLOW_NAME = "process_recording"
#: The batch workflow's registered name (what a client enqueues: one per batch).
BATCH_WORKFLOW_NAME = "process_batch"
#: DBOS application name and version shared by workers and the enqueuing client.
APP_NAME = "quarry"
APP_VERSION = "quarry-pipeline-1"
#: The register step's recorded name in profiles metadata and relabel (``register`` in the
#: profiles' step lists: :data:`pipeline.job.PROFILES`).
REGISTER_METADATA = "register-metadata"


_context: WorkerContext | None = None


def set_context(context: WorkerContext) -> None:
    """Set this process's worker context (before DBOS launches)."""
    global _context
    _context = context


_local = threading.local()
#: ``application_name`` of the steps' connections (``pg_stat_activity`` tells them apart).
STEPS_APPLICATION = "quarry-pipeline-steps"


def _connection() -> psycopg.Connection[Any]:
    """This thread's connection to the operational database (autocommit), opened at its
    first step that needs one and kept: a connection per step cost a backend start and an
    authentication per recording, on the cores the steps run on (docs/benchmarks.md); one
    found closed or broken (the database restarted) is opened again."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        conn = psycopg.connect(_ctx().dsn, autocommit=True, application_name=STEPS_APPLICATION)
        _local.conn = conn
    return conn


def _ctx() -> WorkerContext:
    if _context is None:
        raise RuntimeError("worker context not set: run pipeline.worker.run_worker")
    return _context


def _enter(step: str) -> WorkerContext:
    """Log the step's start (``steps.log`` in the workflow's folder, one line per attempt),
    wait at the pause point while its file exists (an operator's or a test's handle on a run
    mid-step), and fail while the failure file exists (``quarry worker --fail-before``)."""
    ctx = _ctx()
    workflow_id = DBOS.workflow_id or "none"
    folder = ctx.paths.folder(workflow_id)
    with (folder / "steps.log").open("a") as log:
        log.write(step + "\n")
    if step == ctx.pause_before and ctx.pause_file is not None:
        (folder / f"paused-{step}").touch()
        while ctx.pause_file.exists():
            time.sleep(0.05)
    if step == ctx.fail_before and ctx.fail_file is not None and ctx.fail_file.exists():
        retryable = ctx.fail_file.read_text().strip() == "retryable"
        raise PipelineError("injected failure", retryable=retryable, step=step)
    return ctx


def _step(name: str, func: Callable[..., R], *args: Any) -> R:
    """Run ``func(*args)`` as the DBOS step ``name``: recorded when it returns or fails; a
    retryable failure (:func:`pipeline.errors.is_retryable`) tried again with the worker's
    back-off, a terminal one recorded at once."""
    retry = _ctx().retry
    options: StepOptions = {
        "name": name,
        "retries_allowed": retry.attempts > 1,
        "max_attempts": retry.attempts,
        "interval_seconds": retry.interval_s,
        "backoff_rate": retry.backoff,
        "should_retry": is_retryable,
    }
    return DBOS.run_step(options, func, *args)


def _fetch(job: Job) -> str:
    ctx = _enter("fetch")
    return steps.fetch(job, ctx.paths, _wid())


def _decode(job: Job, source_path: str) -> str:
    ctx = _enter("decode")
    source_path = steps.source_here(job, ctx.paths, _wid(), source_path)
    return steps.decode(job, ctx.paths, _wid(), source_path)


def _transform(job: Job, decoded: str) -> str:
    ctx = _enter("transform")
    decoded = steps.decoded_here(job, ctx.paths, _wid(), decoded)
    return steps.transform(job, ctx.paths, _wid(), decoded)


def _encode(job: Job, transformed: str) -> dict[str, Any]:
    ctx = _enter("encode")
    transformed = steps.episode_here(job, ctx.paths, _wid(), transformed)
    return steps.encode(job, ctx.paths, transformed)


def _qc(container: dict[str, Any], transformed: str | None, job: Job | None) -> dict[str, Any]:
    ctx = _enter("qc")
    store = ctx.paths.storage_options
    if transformed is not None:
        assert job is not None
        transformed = steps.episode_here(job, ctx.paths, _wid(), transformed)
        return steps.qc(container, transformed, None, store)
    return steps.qc(container, None, _connection(), store)


def _stats(container: dict[str, Any]) -> list[Any]:
    ctx = _enter("stats")
    return steps.stats(container, ctx.paths.storage_options)


def _enrich(container: dict[str, Any]) -> list[tuple[str, str, int | None, int | None]]:
    ctx = _enter("enrich")
    return steps.enrich(container, ctx.paths.storage_options)


def _register(
    job: Job,
    container: dict[str, Any],
    quality: dict[str, Any],
    dims: list[Any],
    labels: list[tuple[str, str, int | None, int | None]],
) -> bool:
    ctx = _enter("register")
    store = ctx.paths.storage_options
    return steps.register(_connection(), job, container, quality, dims, labels, store)


def _update(
    job: Job,
    quality: dict[str, Any] | None,
    dims: list[Any] | None,
    labels: list[tuple[str, str, int | None, int | None]],
) -> bool:
    _enter("register")
    return steps.update(_connection(), job, quality, dims, labels)


@DBOS.workflow(name=WORKFLOW_NAME)
def process_recording(data: dict[str, Any]) -> dict[str, Any]:
    """Run the steps of the job ``data``'s profile (:meth:`Job.to_dict`); the registered
    container."""
    job = Job.from_dict(data)
    if job.profile in FROM_CONTAINER:
        return _from_container(job)
    source_path = _step("fetch", _fetch, job)
    decoded = _step("decode", _decode, job, source_path)
    transformed = _step("transform", _transform, job, decoded)
    container = _step("encode", _encode, job, transformed)
    quality = _step("qc", _qc, container, transformed, job)
    dims = _step("stats", _stats, container)
    labels = _step("enrich", _enrich, container)
    changed = _step("register", _register, job, container, quality, dims, labels)
    steps.clean(_ctx().paths, _wid())
    return {**container, "episode_id": job.source.episode_id, "changed": changed}


def _from_container(job: Job) -> dict[str, Any]:
    _step("fetch", _fetch, job)
    container = steps.container_of(job)
    quality = dims = None
    if job.profile == "metadata":
        quality = _step("qc", _qc, container, None, None)
        dims = _step("stats", _stats, container)
    labels = _step("enrich", _enrich, container)
    changed = _step(REGISTER_METADATA, _update, job, quality, dims, labels)
    steps.clean(_ctx().paths, _wid())
    return {**container, "episode_id": job.source.episode_id, "changed": changed}


def _wid() -> str:
    return DBOS.workflow_id or "none"


@DBOS.workflow(name=BATCH_WORKFLOW_NAME)
def process_batch(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run the recordings' workflows of one batch (:func:`pipeline.packing.pack`), one after
    the other, each a child workflow with its own ID ``<run>:<episode>``: a recording that
    ran already (enqueued twice, or by another batch) is not run again, its result read
    back; one that fails is reported with its error and never stops the batch."""
    out: list[dict[str, Any]] = []
    for data in jobs:
        job = Job.from_dict(data)
        try:
            with SetWorkflowID(job.workflow_id):
                out.append(process_recording(data))
        except Exception as error:  # the child's error stays in its workflow
            out.append({"episode_id": job.source.episode_id, "error": type(error).__name__})
    return out
