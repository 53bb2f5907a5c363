"""The steps' connection to the operational database: one per worker thread, kept across
recordings, opened again when it was closed or broke (the database restarted)."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from pipeline import workflow
from pipeline.job import WorkerContext, WorkerPaths


def test_the_steps_connection_is_kept_per_thread_and_reopened_when_gone(
    tmp_path: Path, pg_dsn: str
) -> None:
    workflow.set_context(WorkerContext(WorkerPaths(tmp_path, tmp_path), pg_dsn))
    try:
        check_connections(pg_dsn)
    finally:
        workflow._context = None
        workflow._local.__dict__.clear()


def check_connections(pg_dsn: str) -> None:
    first = workflow._connection()
    assert workflow._connection() is first  # kept: no new backend per recording
    assert first.execute("SELECT 1").fetchone() == (1,)
    first.close()
    second = workflow._connection()
    assert second is not first and not second.closed

    # A connection the server dropped (a restart) is broken: the next step gets a new one.
    pid = second.info.backend_pid
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        second.execute("SELECT 1")
    third = workflow._connection()
    assert third is not second and third.execute("SELECT 1").fetchone() == (1,)

    # Another thread (DBOS runs workflows on a pool) has its own.
    other: list[psycopg.Connection[object]] = []
    thread = threading.Thread(target=lambda: other.append(workflow._connection()))
    thread.start()
    thread.join()
    assert other[0] is not third
    other[0].close()
    third.close()
