"""Options and output helpers shared by the subcommands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from quarry.settings import Settings

STATE_DIR = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State folder (default .quarry/, or $QUARRY_STATE_DIR).",
)
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
STATE_DIR_KEY = "quarry.state_dir"
"""Where :func:`build_settings` leaves the state folder in the click context's ``meta``, for
the exception boundary (it writes an unexpected error's traceback under ``<state>/logs``)."""


def build_settings(state_dir: Path | None) -> Settings:
    """The process's one settings object: flags over environment over defaults."""
    settings = Settings(state_dir=state_dir) if state_dir is not None else Settings()
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[STATE_DIR_KEY] = settings.paths.root
    return settings


def emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    click.echo(json.dumps(payload, indent=2, default=str) if as_json else text)
