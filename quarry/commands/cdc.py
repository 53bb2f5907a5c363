"""``quarry cdc follow | status``."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import asdict
from pathlib import Path
from types import FrameType

import click

from cdc.follower import follow as run_follower
from cdc.status import read_status
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from warehouse.backends import open_warehouse


@click.group()
def cdc() -> None:
    """Change-data-capture from Postgres into the warehouse."""


@cdc.command()
@STATE_DIR
@click.option(
    "--resnapshot",
    is_flag=True,
    help="Drop the slot and take a new initial snapshot (only by explicit request).",
)
def follow(state_dir: Path | None, resnapshot: bool) -> None:
    """Run the CDC follower in the foreground until SIGTERM/SIGINT (``up`` runs it for you)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = build_settings(state_dir)
    config = settings.cdc.model_copy(update={"resnapshot": resnapshot})
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with open_warehouse(settings.warehouse_config()) as warehouse:
        run_follower(settings.operational_dsn(), warehouse, config, stop, settings.paths.cdc_status)


@cdc.command()
@STATE_DIR
@JSON
def status(state_dir: Path | None, as_json: bool) -> None:
    """Position, lag, throughput and last error of the follower."""
    settings = build_settings(state_dir)
    current = read_status(settings.paths.cdc_status)
    if current is None:
        emit({"state": "never ran"}, as_json, "the CDC follower has not run in this state folder")
        raise SystemExit(3)
    doc = asdict(current)
    lines = [f"{key:<20} {value}" for key, value in doc.items()]
    emit(doc, as_json, "\n".join(lines))


def register(group: click.Group) -> None:
    group.add_command(cdc)
