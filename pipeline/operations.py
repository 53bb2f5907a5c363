"""Operations on a run, from outside a worker: its report (state, progress per step,
episode-hours, rate and ETA), cancelling it, and replaying its recordings from a step.

Replay reruns a recording's workflow under its own ID ``<run>:<episode>`` (DBOS's
``rewind_workflow``: the steps before the given one keep their recorded outputs, the rest
are dropped and run again), so the run still has one workflow per recording and ``show``,
``--wait`` and enqueueing the run again see the replayed one; the failure it replaces is kept
in ``pipeline_replays``. DBOS's ``fork_workflow`` would copy the workflow under a new ID, a
second workflow for the same recording.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from dbos import DBOSClient, EnqueueOptions

from .errors import PipelineError
from .job import FROM_CONTAINER, PROFILES, Job
from .progress import TERMINAL, RunRecord, Timing, read_run, run_timing, step_progress
from .runs import RunState, _run_state, client, run_jobs
from .workflow import APP_VERSION, QUEUE_NAME, REGISTER_METADATA, WORKFLOW_NAME

#: Workflow states a cancel stops (DBOS 3.4's ``WorkflowStatusString``).
ACTIVE = ("PENDING", "ENQUEUED")


class RunError(PipelineError):
    """An operation on a run refused: no such run, a step the profile does not run, a
    recording still running. Nothing was changed."""


@dataclass(frozen=True)
class RunReport:
    """What ``quarry pipeline show`` tells of a run."""

    state: RunState
    record: RunRecord | None
    profile: str
    steps: dict[str, dict[str, int]]
    timing: Timing

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON: the state's keys (``run_id``, ``finished``, ``counts``,
        ``failed``, ``errors``) and the progress."""
        state, timing = self.state, self.timing
        counts = state.counts()
        total = len(state.statuses)
        done = counts.get("SUCCESS", 0)
        finished_ones = sum(n for s, n in counts.items() if s in TERMINAL)
        rate = self.rate_per_hour()
        remaining = total - finished_ones
        eta = None if state.finished else (remaining / rate * 3600 if rate else None)
        record = self.record
        return {
            "run_id": state.run_id,
            "finished": state.finished,
            "counts": counts,
            "failed": state.failed,
            "errors": state.errors,
            "profile": self.profile,
            "created_at": record.created_at.isoformat() if record and record.created_at else None,
            "pipeline_version": record.pipeline_version if record else None,
            "selection": record.selection if record else None,
            "recordings": total,
            "done": done,
            "finished_recordings": finished_ones,
            "episode_hours_done": timing.episode_s / 3600,
            "planned_episode_hours": (
                record.planned_episode_s / 3600
                if record and record.planned_episode_s is not None
                else None
            ),
            "steps": [
                {"step": step, **self.steps.get(step, {"done": 0, "failed": 0})}
                for step in PROFILES.get(self.profile, ())
            ],
            "recordings_per_hour": rate,
            "eta_s": eta,
        }

    def rate_per_hour(self) -> float | None:
        """Recordings finished per hour since the run's first recording started (to its last
        finish, once the run finished); ``None`` before one finished."""
        timing = self.timing
        finished_ones = sum(n for s, n in self.state.counts().items() if s in TERMINAL)
        if timing.first_started is None or finished_ones == 0:
            return None
        end = timing.last_completed if self.state.finished else timing.now
        elapsed = max((end or timing.now) - timing.first_started, 1e-3)
        return finished_ones / elapsed * 3600


def run_report(dsn: str, run_id: str) -> RunReport:
    """``run_id``'s report; :class:`RunError` when there is no such run."""
    dbos = client(dsn)
    try:
        jobs = run_jobs(dbos, run_id)
        state = _run_state(dbos, run_id, jobs)
    finally:
        dbos.destroy()
    if not state.statuses:
        raise RunError(f"no run {run_id!r}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        record = read_run(conn, run_id)
        steps = step_progress(conn, run_id)
        timing = run_timing(conn, run_id)
    profile = record.profile if record else _profile(jobs)
    if REGISTER_METADATA in steps:  # profiles metadata and relabel record it so
        steps["register"] = steps.pop(REGISTER_METADATA)
    return RunReport(state, record, profile, steps, timing)


def cancel_run(dsn: str, run_id: str) -> list[str]:
    """Cancel ``run_id``'s batch and recording workflows still pending or enqueued (its
    batches first, so that none starts another recording); finished ones are left as they
    are. The IDs cancelled; :class:`RunError` when there is no such run."""
    dbos = client(dsn)
    try:
        batches = dbos.list_workflows(
            workflow_id_prefix=f"{run_id}/", load_input=False, load_output=False
        )
        recordings = dbos.list_workflows(
            workflow_id_prefix=f"{run_id}:", load_input=False, load_output=False
        )
        if not batches and not recordings:
            raise RunError(f"no run {run_id!r}")
        ids = [w.workflow_id for w in [*batches, *recordings] if str(w.status) in ACTIVE]
        if ids:
            dbos.cancel_workflows(ids)
        return ids
    finally:
        dbos.destroy()


def replay_run(
    dsn: str, run_id: str, from_step: str, episode_ids: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Rerun ``run_id``'s failed (or cancelled) recordings, or the ``episode_ids`` given,
    from ``from_step`` on, the steps before it read back; what was replayed (workflow ID,
    step, previous status). Every recording is checked before any is touched: the step
    must be one of the run's profile, each recording finished, and each must have reached
    the step. A recording whose batch was cancelled before it began runs from its start."""
    dbos = client(dsn)
    try:
        jobs = run_jobs(dbos, run_id)
        state = _run_state(dbos, run_id, jobs)
        if not state.statuses:
            raise RunError(f"no run {run_id!r}")
        plan = _plan_replay(dbos, state, jobs, from_step, episode_ids)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for item in plan:
                _log_replay(conn, state, item, from_step)
        for item in plan:
            _start(dbos, item, jobs[item["workflow_id"]][0])
        return plan
    finally:
        dbos.destroy()


def _plan_replay(
    dbos: DBOSClient,
    state: RunState,
    jobs: dict[str, tuple[Job, str]],
    from_step: str,
    episode_ids: tuple[str, ...],
) -> list[dict[str, Any]]:
    profile = _profile(jobs)
    if not profile:
        raise RunError(f"run {state.run_id} has no batch to replay from")
    if from_step not in PROFILES.get(profile, ()):
        steps = ", ".join(PROFILES.get(profile, ()))
        raise RunError(f"step {from_step!r} is not one of profile {profile}'s ({steps})")
    given = [f"{state.run_id}:{eid}" for eid in dict.fromkeys(episode_ids)]
    targets = given or state.failed
    if not targets:
        raise RunError(f"run {state.run_id} has no failed recording to replay")
    plan = []
    for workflow_id in targets:
        status = state.statuses.get(workflow_id)
        if status is None:
            raise RunError(f"episode {workflow_id.partition(':')[2]} is not in run {state.run_id}")
        if status not in TERMINAL:
            raise RunError(f"{workflow_id} is {status}: only a finished recording is replayed")
        recorded = from_step
        if from_step == "register" and profile in FROM_CONTAINER:
            recorded = REGISTER_METADATA
        first = from_step == PROFILES[profile][0]
        function_id = _function_id(dbos, workflow_id, recorded, first)
        plan.append(
            {"workflow_id": workflow_id, "from": from_step, "previous": status}
            | {"function_id": function_id}
        )
    return plan


def _profile(jobs: dict[str, tuple[Job, str]]) -> str:
    """The run's profile (every job of a run has the same); empty without any batch."""
    return next((job.profile for job, _ in jobs.values()), "")


def _function_id(dbos: DBOSClient, workflow_id: str, step: str, first: bool) -> int | None:
    """The step's function ID in the workflow's records (the profile's ``first`` step: 1,
    the workflow's start); ``None`` when the workflow never started (its batch was cancelled
    before it)."""
    if not dbos.list_workflows(workflow_ids=[workflow_id], load_input=False, load_output=False):
        return None
    if first:
        return 1
    steps = dbos.list_workflow_steps(workflow_id)
    for recorded in steps:
        if recorded["function_name"] == step:
            return int(recorded["function_id"])
    last = str(steps[-1]["function_name"]) if steps else "none"
    raise RunError(
        f"{workflow_id} never reached step {step} (its last recorded step: {last}): replay "
        "it from that step or an earlier one"
    )


def _log_replay(
    conn: psycopg.Connection[Any], state: RunState, item: dict[str, Any], from_step: str
) -> None:
    error = state.errors.get(item["workflow_id"], {})
    conn.execute(
        "INSERT INTO pipeline_replays (run_id, workflow_id, from_step, previous_status,"
        " previous_step, previous_error, previous_message) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (
            state.run_id,
            item["workflow_id"],
            from_step,
            item["previous"] if item["function_id"] is not None else None,
            error.get("step"),
            error.get("error"),
            error.get("message"),
        ),
    )


def _start(dbos: DBOSClient, item: dict[str, Any], job: Job) -> None:
    if item["function_id"] is not None:
        dbos.rewind_workflow(
            item["workflow_id"],
            start_step=item["function_id"],
            application_version=APP_VERSION,
            queue_name=QUEUE_NAME,
        )
        return
    options: EnqueueOptions = {
        "workflow_name": WORKFLOW_NAME,
        "queue_name": QUEUE_NAME,
        "workflow_id": item["workflow_id"],
        "app_version": APP_VERSION,
    }
    dbos.enqueue(options, job.to_dict())
    item["from"] = PROFILES[job.profile][0]


def replays(conn: psycopg.Connection[Any], run_id: str) -> list[dict[str, Any]]:
    """The replays of ``run_id``, oldest first, with the failures they replaced."""
    rows = conn.execute(
        "SELECT workflow_id, from_step, previous_status, previous_step, previous_error,"
        " previous_message, replayed_at FROM pipeline_replays WHERE run_id = %s"
        " ORDER BY replayed_at, workflow_id",
        (run_id,),
    ).fetchall()
    keys = ("workflow_id", "from", "previous_status", "step", "error", "message", "replayed_at")
    return [json.loads(json.dumps(dict(zip(keys, row, strict=True)), default=str)) for row in rows]
