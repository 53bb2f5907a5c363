"""``quarry stats``: what the corpus holds (``GET /v1/corpus/stats``), at one snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from quarry.client import ServiceClient
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit, table


@click.command()
@STATE_DIR
@JSON
@click.option("--snapshot", "snapshot_id", type=click.IntRange(0), help="Read this snapshot.")
def stats(state_dir: Path | None, as_json: bool, snapshot_id: int | None) -> None:
    """Live episodes and hours by robot, task and site; success and QC flag rates; stamps."""
    params = {} if snapshot_id is None else {"snapshot_id": snapshot_id}
    found = ServiceClient.for_state(build_settings(state_dir)).get_json(
        "/v1/corpus/stats", **params
    )
    emit(found, as_json, describe(found))


def describe(found: dict[str, Any]) -> str:
    """The statistics as a few tables a person can read."""
    lines = [
        f"snapshot {found['snapshot_id']}: {found['episodes']} episodes, "
        f"{found['hours']:.3f} h, success {_rate(found['success_rate'])}"
    ]
    for part in ("robot", "task", "site"):
        rows = [
            [g["key"], g["episodes"], round(g["hours"], 3), _rate(g["success_rate"])]
            for g in found[f"by_{part}"]
        ]
        lines += ["", table([part, "episodes", "hours", "success"], rows)]
    flags = [[f["flag"], f["episodes"], _rate(f["rate"])] for f in found["quality_flags"]]
    lines += ["", table(["quality flag", "episodes", "rate"], flags) if flags else "no QC flags"]
    stamps = [
        [stamp, s["version"], s["episodes"]]
        for stamp, counts in found["stamps"].items()
        for s in counts
    ]
    lines += ["", table(["stamp", "version", "episodes"], stamps)]
    return "\n".join(lines)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def register(group: click.Group) -> None:
    group.add_command(stats)
