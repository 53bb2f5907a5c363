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
STATE_DIR_KEY = "quarry.state_dir"
"""Where :func:`build_settings` leaves the state folder in the click context's ``meta``, for
the exception boundary (it writes an unexpected error's traceback under ``<state>/logs``)."""


def build_settings(state_dir: Path | None) -> Settings:
    """The process's one settings object: flags over environment over defaults. With neither
    ``--state-dir`` nor ``QUARRY_STATE_DIR``, the state folder is the nearest ``.quarry/`` with
    a stack in this folder or a parent (else ``.quarry/`` here, where ``quarry up`` makes it)."""
    if state_dir is not None:
        settings = Settings(state_dir=state_dir)
    else:
        settings = Settings()
        if "state_dir" not in settings.model_fields_set:
            found = find_state_dir(Path.cwd())
            if found is not None:
                settings = settings.model_copy(update={"state_dir": found})
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[STATE_DIR_KEY] = settings.paths.root
    return settings


def emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    click.echo(json.dumps(payload, indent=2, default=str) if as_json else text)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """``rows`` under ``headers`` in columns as wide as their widest cell; numbers to the
    right, ``None`` as ``-``."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        parts = [
            c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))
