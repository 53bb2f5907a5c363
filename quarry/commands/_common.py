"""Options and output helpers shared by the subcommands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from quarry.settings import Settings
from quarry.stack.paths import find_state_dir

STATE_DIR = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State folder (default: $QUARRY_STATE_DIR, else the nearest .quarry/ here or above).",
)
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def build_settings(state_dir: Path | None) -> Settings:
    """The process's one settings object: flags over environment over defaults. With neither
    ``--state-dir`` nor ``QUARRY_STATE_DIR``, the state folder is the nearest ``.quarry/`` with
    a stack in this folder or a parent (else ``.quarry/`` here, where ``quarry up`` makes it)."""
    if state_dir is not None:
        return Settings(state_dir=state_dir)
    settings = Settings()
    if "state_dir" not in settings.model_fields_set:
        found = find_state_dir(Path.cwd())
        if found is not None:
            return settings.model_copy(update={"state_dir": found})
    return settings


def emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    click.echo(json.dumps(payload, indent=2, default=str) if as_json else text)
