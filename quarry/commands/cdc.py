"""``quarry cdc follow | status``."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from cdc.follower import follow as run_follower
from cdc.liveness import liveness_at, writer_slot
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
    """Whether the CDC writer feeding the warehouse streams, is stalled or down, and why;
    its position, lag and last error; the follower's figures. Judged from what Postgres holds
    (the writer's reports, its slot's connection, the WAL position), so it holds for a
    follower on another machine and for a Debezium feed. Exits 3 unless streaming."""
    settings = build_settings(state_dir)
    slot = writer_slot(settings.warehouse_config(), settings.cdc.slot)
    live = liveness_at(settings.operational_dsn(), slot)
    doc = live.to_dict()
    emit(doc, as_json, _describe(doc))
    if not live.healthy:
        raise SystemExit(3)


def _describe(doc: dict[str, Any]) -> str:
    """The judgement, then the follower's own figures (what is unknown left out)."""
    figures = doc.get("status") or {}
    lines = [f"{k:<20} {v}" for k, v in doc.items() if v is not None and k != "status"]
    lines += [f"{k:<20} {v}" for k, v in figures.items() if k not in doc and v is not None]
    return "\n".join(lines)


def register(group: click.Group) -> None:
    group.add_command(cdc)
