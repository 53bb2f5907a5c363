"""Asynchronous curation builds: jobs persisted in Postgres (``curation_jobs``), run on a
bounded thread pool of this process, cancellable from any replica.

Honesty over durability: a job survives nothing fancy, but it never reads as pending forever.
The process running a job (its ``owner``) refreshes the job's heartbeat every
``heartbeat_s`` seconds; a queued or running job whose heartbeat is older than ``lease_s``
seconds reads as failed (its process stopped). A cancel marks the row; the owner sees the mark
on its next heartbeat (at once when the cancel reaches the owner itself) and interrupts the
build's running warehouse query.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from curation.cancel import CancelScope, CurationCancelledError
from curation.errors import CurationError, NotFoundError

Connect = Callable[[], psycopg.Connection[Any]]
Build = Callable[[CancelScope], dict[str, Any]]


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = [str(JobStatus.QUEUED), str(JobStatus.RUNNING)]


class JobFinishedError(CurationError):
    """The job already finished; there is nothing left to cancel."""

    title = "Job already finished"
    status = 409


@dataclass(frozen=True)
class Job:
    """A curation job as stored. ``result`` is the curation result once succeeded; ``error``
    says why it failed (``kind``, ``detail`` and the error's context)."""

    id: str
    status: JobStatus
    author: str
    cancel_requested: bool
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        return cls(
            id=str(row["id"]),
            status=JobStatus(row["status"]),
            author=row["author"],
            cancel_requested=row["cancel_requested"],
            result=row["result"],
            error=row["error"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
        )


_COLUMNS = (
    "id, status, author, cancel_requested, result, error, created_at, started_at, finished_at"
)


def describe_error(error: BaseException) -> dict[str, Any]:
    """A job's record of why it failed: the error's kind, message and scalar context."""
    context = getattr(error, "context", {})
    described: dict[str, Any] = {
        k: v for k, v in context.items() if isinstance(v, str | int | float | bool)
    }
    described.update(kind=type(error).__name__, detail=getattr(error, "message", str(error)))
    if isinstance(error, CurationError):
        described.update(status=error.status, title=error.title)
    return described


class JobRunner:
    """Runs and tracks the curation jobs of one service process."""

    def __init__(
        self,
        connect: Connect,
        pool: ThreadPoolExecutor,
        *,
        lease_s: float = 15.0,
        heartbeat_s: float = 1.0,
    ) -> None:
        self.owner = uuid.uuid4().hex
        self.lease_s = lease_s
        self._connect = connect
        self._pool = pool
        self._heartbeat_s = heartbeat_s
        self._scopes: dict[str, CancelScope] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def submit(self, request: dict[str, Any], author: str, build: Build) -> Job:
        """Queue ``build`` as a new job; ``request`` is recorded with it."""
        job_id = str(uuid.uuid4())
        scope = CancelScope()
        with self._lock:
            self._scopes[job_id] = scope
            self._start_heartbeat()
        with self._connect() as conn, conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                f"INSERT INTO curation_jobs (id, request, author, owner) VALUES (%s, %s, %s, %s)"
                f" RETURNING {_COLUMNS}",
                (job_id, Jsonb(request), author, self.owner),
            ).fetchone()
        assert row is not None
        self._pool.submit(self._run, job_id, scope, build)
        return Job.from_row(row)

    def get(self, job_id: str) -> Job:
        """The job, with a lost one (no heartbeat for ``lease_s``) marked failed first."""
        lost = {
            "kind": "JobLostError",
            "detail": f"the service process running this job stopped (no heartbeat for "
            f"{self.lease_s:g} s); submit the curation again",
        }
        with self._connect() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                "UPDATE curation_jobs SET status = 'failed', error = %s, finished_at = now() "
                "WHERE id = %s AND status = ANY(%s) "
                "AND heartbeat_at < now() - make_interval(secs => %s)",
                (Jsonb(lost), _uuid(job_id), ACTIVE, self.lease_s),
            )
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM curation_jobs WHERE id = %s", (_uuid(job_id),)
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no curation job {job_id!r}", job_id=job_id)
        return Job.from_row(row)

    def cancel(self, job_id: str) -> Job:
        """Ask the job to stop; its owner interrupts the running query."""
        job = self.get(job_id)
        if job.status not in ACTIVE:
            raise JobFinishedError(
                f"job {job_id} already {job.status}", job_id=job_id, job_status=str(job.status)
            )
        with self._connect() as conn:
            conn.execute(
                "UPDATE curation_jobs SET cancel_requested = true WHERE id = %s",
                (_uuid(job_id),),
            )
        with self._lock:
            scope = self._scopes.get(job_id)
        if scope is not None:
            scope.cancel()
        return self.get(job_id)

    def close(self) -> None:
        """Stop heartbeating; running builds are cancelled and will read as cancelled."""
        self._stop.set()
        with self._lock:
            scopes = list(self._scopes.values())
        for scope in scopes:
            scope.cancel()

    def _run(self, job_id: str, scope: CancelScope, build: Build) -> None:
        try:
            scope.check()
            self._mark(job_id, JobStatus.RUNNING, "started_at")
            with scope.active():
                result = build(scope)
            self._mark(job_id, JobStatus.SUCCEEDED, "finished_at", result=result)
        except CurationCancelledError:
            self._mark(job_id, JobStatus.CANCELLED, "finished_at")
        except Exception as error:  # every failure is recorded on the job, with its kind
            self._mark(job_id, JobStatus.FAILED, "finished_at", error=describe_error(error))
        finally:
            scope.close()
            with self._lock:
                self._scopes.pop(job_id, None)

    def _mark(
        self,
        job_id: str,
        status: JobStatus,
        stamp: str,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Move the job to ``status`` and set the ``stamp`` column to now (a fixed name)."""
        with self._connect() as conn:
            conn.execute(
                f"UPDATE curation_jobs SET status = %s, {stamp} = now(), heartbeat_at = now(),"
                " result = COALESCE(%s, result), error = COALESCE(%s, error) WHERE id = %s",
                (
                    str(status),
                    None if result is None else Jsonb(result),
                    None if error is None else Jsonb(error),
                    _uuid(job_id),
                ),
            )

    def _start_heartbeat(self) -> None:
        if self._beat is None:
            self._beat = threading.Thread(
                target=self._heartbeat, name="curation-heartbeat", daemon=True
            )
            self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            # The database may be briefly unreachable; the next beat tries again, and a job
            # whose beats stop for a whole lease reads as failed, which is the truth then.
            with contextlib.suppress(psycopg.Error):
                self._beat_once()

    def _beat_once(self) -> None:
        with self._lock:
            if not self._scopes:
                return
        with self._connect() as conn:
            rows = conn.execute(
                "UPDATE curation_jobs SET heartbeat_at = now() "
                "WHERE owner = %s AND status = ANY(%s) RETURNING id, cancel_requested",
                (self.owner, ACTIVE),
            ).fetchall()
        for job_id, requested in rows:
            with self._lock:
                scope = self._scopes.get(str(job_id))
            if requested and scope is not None:
                scope.cancel()


def _uuid(job_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(job_id)
    except ValueError:
        raise NotFoundError(f"no curation job {job_id!r}", job_id=job_id) from None
