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


def build_settings(state_dir: Path | None) -> Settings:
    """The process's one settings object: flags over environment over defaults."""
    return Settings(state_dir=state_dir) if state_dir is not None else Settings()


def emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    click.echo(json.dumps(payload, indent=2, default=str) if as_json else text)
