"""Enqueue a run (one workflow per recording) and follow it, from outside a worker, through
DBOS's client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from dbos import DBOSClient, EnqueueOptions
from dbos._error import DBOSMaxStepRetriesExceeded

from .engine import SYSTEM_SCHEMA, migrate_system, system_url
from .errors import ProfileError
from .job import PROFILES, Job
from .packing import Item, pack
from .progress import TERMINAL, RunRecord, record_run
from .workflow import APP_NAME, APP_VERSION, BATCH_WORKFLOW_NAME, QUEUE_NAME

_DONE = set(TERMINAL)


@dataclass(frozen=True)
class RunState:
    """A run's workflows by status (``PENDING``, ``ENQUEUED``, ``SUCCESS``, ``ERROR`` ...);
    ``errors``: a failed workflow's step, error class and message."""

    run_id: str
    statuses: dict[str, str]
    errors: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return all(s in _DONE for s in self.statuses.values())

    @property
    def failed(self) -> list[str]:
        return sorted(w for w, s in self.statuses.items() if s != "SUCCESS" and s in _DONE)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for status in self.statuses.values():
            out[status] = out.get(status, 0) + 1
        return out


def new_run_id() -> str:
    """A run's ID (a prefix of every workflow ID of the run)."""
    return "run-" + uuid.uuid4().hex[:12]


def client(dsn: str) -> DBOSClient:
    """A DBOS client on the system schema in the operational database ``dsn``."""
    return DBOSClient(
        system_database_url=system_url(dsn),
        dbos_system_schema=SYSTEM_SCHEMA,
        application_name=APP_NAME,
    )


def batch_id(run_id: str, index: int) -> str:
    """A batch workflow's ID: ``<run>/batch-<n>`` (outside the ``<run>:`` prefix that
    :func:`run_state` lists, which holds the recordings' workflows)."""
    return f"{run_id}/batch-{index}"


def job_item(job: Job) -> Item:
    """What packing weighs of a job: the source's bytes and, where known before decoding, its
    duration (a synthetic source's mean configured duration, or ``options["duration_s"]``)."""
    options = job.source.options
    duration = options.get("duration_s")
    if duration is None and isinstance(options.get("config"), dict):
        span = options["config"].get("duration_s")
        if isinstance(span, list | tuple) and len(span) == 2:
            duration = (float(span[0]) + float(span[1])) / 2
    return Item(job.source.episode_id, job.source.size_bytes, float(duration or 0.0))


def plan_batches(jobs: list[Job], batch_episodes: int, fixed_cost: float = 0.0) -> list[list[Job]]:
    """``jobs`` packed into ``ceil(len(jobs) / batch_episodes)`` batches of about equal cost
    (:func:`pipeline.packing.pack`, a recording's fixed cost ``fixed_cost``)."""
    by_key = {job.source.episode_id: job for job in jobs}
    if len(by_key) != len(jobs):
        raise ProfileError("an episode is given twice in one run")
    return [
        [by_key[i.key] for i in batch]
        for batch in pack([job_item(j) for j in jobs], batch_episodes, fixed_cost)
    ]


def enqueue_run(
    dsn: str,
    jobs: Iterable[Job],
    batch_episodes: int = 8,
    fixed_cost: float = 0.0,
    selection: dict[str, Any] | None = None,
) -> list[str]:
    """Enqueue the jobs packed into batches (:func:`plan_batches`), one batch workflow each,
    which runs one child workflow per job, its ID ``<run>:<episode>`` (so a job enqueued
    twice runs once), and record the run (``pipeline_runs``, with ``selection``: what chose
    its recordings); the recordings' workflow IDs, in packing order."""
    jobs = list(jobs)
    for job in jobs:
        if job.profile not in PROFILES:
            raise ProfileError(f"unknown profile {job.profile!r}", episode=job.source.episode_id)
    return enqueue_batches(dsn, plan_batches(jobs, batch_episodes, fixed_cost), selection)


def run_record(batches: list[list[Job]], selection: dict[str, Any] | None = None) -> RunRecord:
    """The record of a run of ``batches``: its size, bytes and, when every recording's
    duration is known before decoding (:func:`job_item`), its planned seconds."""
    jobs = [job for batch in batches for job in batch]
    items = [job_item(job) for job in jobs]
    known = all(item.duration_s > 0 for item in items)
    return RunRecord(
        jobs[0].run_id,
        jobs[0].profile,
        jobs[0].pipeline_version,
        len(jobs),
        len(batches),
        sum(item.size_bytes for item in items),
        sum(item.duration_s for item in items) if known else None,
        selection or {},
    )


def enqueue_batches(
    dsn: str, batches: list[list[Job]], selection: dict[str, Any] | None = None
) -> list[str]:
    """Record the run (:func:`run_record`) and enqueue ``batches`` as they are (one batch
    workflow each, in order); the recordings' workflow IDs. :func:`enqueue_run` packs them
    first; the benchmark also enqueues unpacked ones."""
    migrate_system(dsn)
    if batches:
        with psycopg.connect(dsn, autocommit=True) as conn:
            record_run(conn, run_record(batches, selection))
    dbos = client(dsn)
    try:
        ids = []
        for index, batch in enumerate(batches):
            options: EnqueueOptions = {
                "workflow_name": BATCH_WORKFLOW_NAME,
                "queue_name": QUEUE_NAME,
                "workflow_id": batch_id(batch[0].run_id, index),
                "app_version": APP_VERSION,
            }
            dbos.enqueue(options, [job.to_dict() for job in batch])
            ids += [job.workflow_id for job in batch]
        return ids
    finally:
        dbos.destroy()


def run_state(dsn: str, run_id: str) -> RunState:
    """The status of every workflow of ``run_id``, and each failed one's step, error and
    recording."""
    dbos = client(dsn)
    try:
        return _run_state(dbos, run_id, run_jobs(dbos, run_id))
    finally:
        dbos.destroy()


def run_jobs(dbos: DBOSClient, run_id: str) -> dict[str, tuple[Job, str]]:
    """Every recording of ``run_id`` (from its batches' inputs) by workflow ID, with its
    batch's status."""
    jobs: dict[str, tuple[Job, str]] = {}
    for batch in dbos.list_workflows(workflow_id_prefix=f"{run_id}/", load_output=False):
        for data in batch.input["args"][0] if batch.input else []:
            job = Job.from_dict(data)
            jobs.setdefault(job.workflow_id, (job, str(batch.status)))
    return jobs


def _run_state(dbos: DBOSClient, run_id: str, jobs: dict[str, tuple[Job, str]]) -> RunState:
    found = dbos.list_workflows(workflow_id_prefix=f"{run_id}:", load_input=False)
    errors = {
        w.workflow_id: _error_of(dbos, w.workflow_id, w.error, jobs.get(w.workflow_id))
        for w in found
        if w.error is not None
    }
    statuses = {w.workflow_id: str(w.status) for w in found}
    # A recording whose batch has not reached it yet has no workflow: its batch's status
    # stands for it (ENQUEUED, PENDING, or CANCELLED when the batch was).
    for workflow_id, (_, batch_status) in jobs.items():
        statuses.setdefault(workflow_id, batch_status)
    return RunState(run_id, statuses, errors)


def _error_of(
    dbos: DBOSClient, workflow_id: str, error: Exception, job: tuple[Job, str] | None
) -> dict[str, str]:
    """The failed step (the last recorded with an error), the error's class and message (a
    step that ran out of retries: its last attempt's, ``after N attempts``), the episode and
    the recording (the source's URI)."""
    failed = [s for s in dbos.list_workflow_steps(workflow_id) if s["error"] is not None]
    step = str(failed[-1]["function_name"]) if failed else ""
    message = str(error)
    if isinstance(error, DBOSMaxStepRetriesExceeded) and error.errors:
        message = f"{error.errors[-1]} (after {len(error.errors)} attempts)"
        error = error.errors[-1]
    return {
        "step": step,
        "error": type(error).__name__,
        "message": message,
        "episode": workflow_id.partition(":")[2],
        "recording": job[0].source.uri if job else "",
    }


def wait_run(dsn: str, run_id: str, timeout_s: float, poll_s: float = 0.5) -> RunState:
    """Poll until every workflow of ``run_id`` finished, or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = run_state(dsn, run_id)
        if state.finished or time.monotonic() > deadline:
            return state
        time.sleep(poll_s)


def workflow_steps(dsn: str, workflow_id: str) -> list[dict[str, Any]]:
    """The recorded steps of a workflow, in order (name, whether it has an output/error)."""
    dbos = client(dsn)
    try:
        return [
            {"name": s["function_name"], "error": s["error"] is not None}
            for s in dbos.list_workflow_steps(workflow_id)
        ]
    finally:
        dbos.destroy()
