"""``quarry worker``: a DBOS process that dequeues recordings' workflows and runs them;
on start it recovers the workflows its executor left unfinished (a killed worker's)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from dbos import DBOS, DBOSConfig

from . import workflow
from .config import PipelineConfig
from .engine import SYSTEM_SCHEMA, system_url
from .job import WorkerContext
from .workflow import APP_NAME, APP_VERSION, QUEUE_NAME


def launch(
    context: WorkerContext, executor_id: str = "local", limits: PipelineConfig | None = None
) -> None:
    """Start DBOS in this process for ``context`` (recovering ``executor_id``'s workflows),
    the queue's limits ``limits``'s."""
    workflow.set_context(context)
    config: DBOSConfig = {
        "name": APP_NAME,
        "application_version": APP_VERSION,
        "executor_id": executor_id,
        "system_database_url": system_url(context.dsn),
        "dbos_system_schema": SYSTEM_SCHEMA,
    }
    DBOS(config=config)
    DBOS.launch()
    # One batch at a time per worker process (by default): a step's encoder and decoder are
    # the process's CPU; more workers (processes, machines) take from the same queue. The
    # limiter staggers batch starts across workers (docs/pipeline.md, "Batches").
    DBOS.register_queue(QUEUE_NAME, **(limits or PipelineConfig()).queue_options())


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
    try:
        stop.wait()
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)
