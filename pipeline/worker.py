"""``quarry worker``: a DBOS process that dequeues recordings' workflows and runs them;
on start it recovers the workflows its executor left unfinished (a killed worker's).

Workers on many machines also recover each other's: each says it is alive every
:data:`HEARTBEAT_S` in a table of the system schema (Postgres's clock, so the machines' clocks
do not matter), and one that finds another silent for :data:`DEAD_AFTER_S` hands that
executor's pending workflows back to the queue (DBOS's recovery of an executor's workflows,
which re-enqueues them; doing so twice, from two survivors, changes nothing once one
dequeued them). They resume at the step each was in, on whichever worker dequeues them.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import psycopg
from dbos import DBOS, DBOSConfig

from . import workflow
from .config import PipelineConfig
from .engine import SYSTEM_SCHEMA, engine_options, system_url
from .job import WorkerContext
from .workflow import APP_NAME, APP_VERSION, QUEUE_NAME

#: How often a worker records that it is alive, seconds.
HEARTBEAT_S = 2.0
#: A worker silent this long is taken for dead and its pending workflows recovered, seconds.
DEAD_AFTER_S = 10.0
#: How often DBOS's notifier thread flushes LISTEN/NOTIFY payloads (events and streams), s.
#: Quarry's workflows use neither, and DBOS's default (0.01 s) wakes that thread 100 times a
#: second on the worker's one core: about 9 % of the core's samples while a worker ran the
#: ingest benchmark (py-spy, docs/benchmarks.md).
NOTIFY_COALESCE_S = 0.5
#: The workers' heartbeats (executor ID, last seen), in DBOS's schema: the pipeline's own.
WORKERS_TABLE = f"{SYSTEM_SCHEMA}.quarry_workers"

log = logging.getLogger(__name__)


def launch(
    context: WorkerContext, executor_id: str = "local", limits: PipelineConfig | None = None
) -> None:
    """Start DBOS in this process for ``context`` (recovering ``executor_id``'s workflows),
    the queue's limits ``limits``'s."""
    workflow.set_context(context)
    limits = limits or PipelineConfig()
    config: DBOSConfig = {
        "name": APP_NAME,
        "application_version": APP_VERSION,
        "executor_id": executor_id,
        "system_database_url": system_url(context.dsn),
        "dbos_system_schema": SYSTEM_SCHEMA,
        "notification_coalesce_sec": NOTIFY_COALESCE_S,
        "db_engine_kwargs": engine_options(context.dsn, limits.synchronous_step_records),
    }
    DBOS(config=config)
    DBOS.launch()
    # One batch at a time per worker process (by default): a step's encoder and decoder are
    # the process's CPU; more workers (processes, machines) take from the same queue. The
    # limiter staggers batch starts across workers (docs/pipeline.md, "Batches").
    DBOS.register_queue(QUEUE_NAME, **limits.queue_options())


def run_worker(
    context: WorkerContext, executor_id: str = "local", limits: PipelineConfig | None = None
) -> None:
    """Run a worker until SIGTERM or SIGINT, then stop DBOS (unfinished workflows stay
    pending and are recovered by the next start)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    launch(context, executor_id, limits)
    conn: psycopg.Connection[Any] | None = None
    try:
        with psycopg.connect(context.dsn, autocommit=True) as first:
            first.execute(
                f"CREATE TABLE IF NOT EXISTS {WORKERS_TABLE}"
                " (executor_id text PRIMARY KEY, seen_at timestamptz NOT NULL)"
            )
        while not stop.is_set():
            try:
                # One connection for the beats, kept (a connection per beat cost a backend
                # start every HEARTBEAT_S on the cores the steps run on); reopened when broken.
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(context.dsn, autocommit=True)
                recover_dead(conn, executor_id)
            except psycopg.Error as error:  # the database away a moment: the next beat
                log.warning("heartbeat failed: %s", error)
            stop.wait(HEARTBEAT_S)
    finally:
        if conn is not None:
            conn.close()
        DBOS.destroy(workflow_completion_timeout_sec=0)


def recover_dead(
    conn: psycopg.Connection[Any], executor_id: str, dead_after_s: float = DEAD_AFTER_S
) -> list[str]:
    """Record ``executor_id`` alive, and recover the pending workflows of every other
    executor silent for ``dead_after_s`` (its row is dropped once they are back in the
    queue; a restart with its ID records it again), on the autocommit connection ``conn``.
    The executors recovered."""
    conn.execute(
        f"INSERT INTO {WORKERS_TABLE} (executor_id, seen_at) VALUES (%s, now())"
        " ON CONFLICT (executor_id) DO UPDATE SET seen_at = now()",
        (executor_id,),
    )
    stale = "seen_at < now() - make_interval(secs => %s) AND executor_id <> %s"
    dead = [
        row[0]
        for row in conn.execute(
            f"SELECT executor_id FROM {WORKERS_TABLE} WHERE {stale}",
            (dead_after_s, executor_id),
        )
    ]
    for other in dead:
        handles = DBOS._recover_pending_workflows([other])
        log.warning("executor %s silent: recovered %d workflows", other, len(handles))
        conn.execute(
            f"DELETE FROM {WORKERS_TABLE} WHERE executor_id = %s AND {stale}",
            (other, dead_after_s, executor_id),
        )
    return dead
