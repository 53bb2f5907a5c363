"""Runs' records and progress, in SQL: the pipeline's own table ``pipeline_runs``
(migration 0010) and DBOS 3.4's tables in :data:`~pipeline.engine.SYSTEM_SCHEMA`, read
directly: ``workflow_status`` (one row per workflow: ``name``, ``status``, ``created_at``,
``started_at_epoch_ms`` for a dequeued one, ``completed_at``, ``updated_at``, epoch ms) and
``operation_outputs`` (one row per finished step: ``function_name``, ``error``). So a run's
progress, or every run's for ``/metrics``, is one or two queries instead of a client call per
workflow. Those tables are DBOS's, not a published interface: this module is the one place
that reads them, and a DBOS upgrade checks it (``tests/pipeline/test_operations.py``).

Episode-hours: a recording workflow's ID is ``<run>:<episode>``, so the episodes a run
registered and their durations (``episodes.end_ns - start_ns``) join on the ID.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from .engine import SYSTEM_SCHEMA

#: DBOS's registered names of the two workflows (:mod:`pipeline.workflow`; repeated here so
#: that reading progress does not import DBOS).
RECORDING = "process_recording"
BATCH = "process_batch"
#: Workflow states that are final (DBOS 3.4's ``WorkflowStatusString``).
TERMINAL = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
_UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_STATUS = sql.Identifier(SYSTEM_SCHEMA, "workflow_status")
_STEPS = sql.Identifier(SYSTEM_SCHEMA, "operation_outputs")


@dataclass(frozen=True)
class RunRecord:
    """What a run was asked to do (a row of ``pipeline_runs``): its ``selection`` (``paths``,
    ``where``, ``episodes``, ``labels``, whichever were given), the number of recordings
    and batches, the sources' bytes and, where known before decoding, their seconds."""

    run_id: str
    profile: str
    pipeline_version: int
    recordings: int
    batches: int
    planned_bytes: int
    planned_episode_s: float | None = None
    selection: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


@dataclass(frozen=True)
class Timing:
    """A run's recording workflows: seconds of episodes registered, when the first started
    and the last finished (epoch seconds), and the database's clock now."""

    episode_s: float
    first_started: float | None
    last_completed: float | None
    now: float


def record_run(conn: psycopg.Connection[Any], run: RunRecord) -> None:
    """Write ``run``'s record (kept as it is when the run was enqueued before)."""
    conn.execute(
        "INSERT INTO pipeline_runs (run_id, profile, pipeline_version, selection, recordings,"
        " batches, planned_bytes, planned_episode_s) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (run_id) DO NOTHING",
        (
            run.run_id,
            run.profile,
            run.pipeline_version,
            json.dumps(run.selection, sort_keys=True),
            run.recordings,
            run.batches,
            run.planned_bytes,
            run.planned_episode_s,
        ),
    )


def read_run(conn: psycopg.Connection[Any], run_id: str) -> RunRecord | None:
    """``run_id``'s record; ``None`` for a run enqueued without one (before migration 0010)."""
    row = conn.execute(_RUN_COLUMNS + " WHERE run_id = %s", (run_id,)).fetchone()
    return None if row is None else _record(row)


def list_runs(conn: psycopg.Connection[Any], limit: int) -> list[tuple[RunRecord, dict[str, int]]]:
    """The ``limit`` newest runs, newest first, each with its workflows by kind and status
    (``{"recording:SUCCESS": 3, "batch:PENDING": 1, ...}``)."""
    runs = [
        _record(row)
        for row in conn.execute(_RUN_COLUMNS + " ORDER BY created_at DESC LIMIT %s", (limit,))
    ]
    counts: dict[str, dict[str, int]] = {run.run_id: {} for run in runs}
    query = sql.SQL(
        "SELECT r.id, w.name, w.status, count(*) FROM unnest(%s::text[]) AS r(id)"
        " JOIN {status} AS w ON starts_with(w.workflow_uuid, r.id || ':')"
        " OR starts_with(w.workflow_uuid, r.id || '/')"
        " WHERE w.name IN (%s, %s) GROUP BY 1, 2, 3"
    ).format(status=_STATUS)
    if runs and _has_system_schema(conn):
        for run_id, name, status, n in conn.execute(query, ([*counts], RECORDING, BATCH)):
            kind = "recording" if name == RECORDING else "batch"
            counts[run_id][f"{kind}:{status}"] = int(n)
    return [(run, counts[run.run_id]) for run in runs]


def run_timing(conn: psycopg.Connection[Any], run_id: str) -> Timing:
    """Seconds of the episodes ``run_id`` registered, and when its recordings ran."""
    query = sql.SQL(
        "SELECT coalesce(sum(e.end_ns - e.start_ns), 0)::float8 / 1e9,"
        " min(coalesce(w.started_at_epoch_ms, w.created_at))::float8 / 1e3,"
        " max(coalesce(w.completed_at, w.updated_at)) FILTER (WHERE w.status IN"
        " ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'))::float8 / 1e3,"
        " extract(epoch FROM now())::float8"
        " FROM {status} AS w LEFT JOIN episodes AS e ON w.status = 'SUCCESS'"
        " AND e.id = (CASE WHEN substr(w.workflow_uuid, %(n)s) ~ %(uuid)s"
        " THEN substr(w.workflow_uuid, %(n)s)::uuid END)"
        " WHERE starts_with(w.workflow_uuid, %(prefix)s) AND w.name = %(name)s"
    ).format(status=_STATUS)
    prefix = f"{run_id}:"
    params = {"n": len(prefix) + 1, "uuid": _UUID, "prefix": prefix, "name": RECORDING}
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return Timing(float(row[0]), row[1], row[2], float(row[3]))


def step_progress(conn: psycopg.Connection[Any], run_id: str) -> dict[str, dict[str, int]]:
    """How many of ``run_id``'s recording workflows finished each step (``done``) or have it
    recorded as failed (``failed``), by the step's recorded name."""
    query = sql.SQL(
        "SELECT function_name, count(*) FILTER (WHERE error IS NULL),"
        " count(*) FILTER (WHERE error IS NOT NULL) FROM {steps}"
        " WHERE starts_with(workflow_uuid, %s) GROUP BY function_name"
    ).format(steps=_STEPS)
    rows = conn.execute(query, (f"{run_id}:",)).fetchall()
    return {str(name): {"done": int(done), "failed": int(failed)} for name, done, failed in rows}


@dataclass(frozen=True)
class RunTotals:
    """One run's workflows by kind and status, seconds of episodes registered, its record."""

    run_id: str
    workflows: dict[tuple[str, str], int]
    episode_s: float
    recordings: int | None

    @property
    def finished(self) -> bool:
        return all(status in TERMINAL for _, status in self.workflows)

    def recordings_in(self, status: str) -> int:
        return self.workflows.get(("recording", status), 0)


def pipeline_totals(conn: psycopg.Connection[Any]) -> list[RunTotals]:
    """Every run's totals, in one query (``/metrics``); none before the pipeline's schema
    exists (no run was ever enqueued)."""
    if not _has_system_schema(conn):
        return []
    query = sql.SQL(
        "WITH w AS (SELECT regexp_replace(workflow_uuid, '(:|/batch-).*$', '') AS run_id,"
        " name, status, CASE WHEN name = %(name)s AND status = 'SUCCESS'"
        " AND split_part(workflow_uuid, ':', 2) ~ %(uuid)s"
        " THEN split_part(workflow_uuid, ':', 2)::uuid END AS episode_id"
        " FROM {status} WHERE name IN (%(name)s, %(batch)s))"
        " SELECT w.run_id, w.name, w.status, count(*),"
        " coalesce(sum(e.end_ns - e.start_ns), 0)::float8 / 1e9, max(r.recordings)"
        " FROM w LEFT JOIN episodes AS e ON e.id = w.episode_id"
        " LEFT JOIN pipeline_runs AS r ON r.run_id = w.run_id GROUP BY 1, 2, 3"
    ).format(status=_STATUS)
    by_run: dict[str, dict[str, Any]] = {}
    for run_id, name, status, n, seconds, recordings in conn.execute(
        query, {"name": RECORDING, "batch": BATCH, "uuid": _UUID}
    ):
        run = by_run.setdefault(run_id, {"workflows": {}, "episode_s": 0.0, "recordings": None})
        kind = "recording" if name == RECORDING else "batch"
        run["workflows"][(kind, status)] = int(n)
        run["episode_s"] += float(seconds)
        run["recordings"] = recordings
    return [RunTotals(run_id, **fields) for run_id, fields in sorted(by_run.items())]


def _has_system_schema(conn: psycopg.Connection[Any]) -> bool:
    found = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{SYSTEM_SCHEMA}.workflow_status",)
    ).fetchone()
    return bool(found and found[0])


_RUN_COLUMNS = (
    "SELECT run_id, profile, pipeline_version, recordings, batches, planned_bytes,"
    " planned_episode_s, selection, created_at FROM pipeline_runs"
)


def _record(row: tuple[Any, ...]) -> RunRecord:
    run_id, profile, version, recordings, batches, planned, seconds, selection, created = row
    return RunRecord(
        run_id, profile, version, recordings, batches, planned, seconds, selection, created
    )


def summarize(run: RunRecord, counts: dict[str, int]) -> dict[str, Any]:
    """A run's line in ``quarry pipeline runs``: its recordings by state (a recording no
    batch reached yet counted ``ENQUEUED``, or ``CANCELLED`` once no batch of the run is
    left to reach it), done of total, whether it finished."""
    states: dict[str, int] = {}
    batches_active = False
    for key, n in counts.items():
        kind, _, status = key.partition(":")
        if kind == "recording":
            states[status] = states.get(status, 0) + n
        elif status not in TERMINAL:
            batches_active = True
    unreached = run.recordings - sum(states.values())
    if unreached > 0:
        status = "ENQUEUED" if batches_active else "CANCELLED"
        states[status] = states.get(status, 0) + unreached
    return {
        "run_id": run.run_id,
        "profile": run.profile,
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "pipeline_version": run.pipeline_version,
        "recordings": run.recordings,
        "done": states.get("SUCCESS", 0),
        "counts": dict(sorted(states.items())),
        "finished": not batches_active and all(s in TERMINAL for s in states),
    }
