"""``quarry labels add | list | rm``: an episode's enrichment labels, through the service.

A label is ``KEY=VALUE`` on an episode; with ``--start-ns`` and ``--end-ns`` (log time,
integer nanoseconds, inside the episode) it labels that segment. Curations see labels once CDC
has carried them to the warehouse (``episode_labels``; ``segments`` filters).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from quarry.client import ServiceClient
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit, table

_COLUMNS = ["id", "key", "value", "start_ns", "end_ns", "author", "created_at"]


@click.group()
def labels() -> None:
    """Label episodes (and segments of them) for curation."""


@labels.command()
@STATE_DIR
@JSON
@click.argument("episode_id")
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--start-ns", type=int, default=None, help="Segment start (log time, ns).")
@click.option("--end-ns", type=int, default=None, help="Segment end, exclusive (log time, ns).")
def add(
    state_dir: Path | None,
    as_json: bool,
    episode_id: str,
    pairs: tuple[str, ...],
    start_ns: int | None,
    end_ns: int | None,
) -> None:
    """Add labels KEY=VALUE to an episode (to its segment with --start-ns/--end-ns)."""
    if (start_ns is None) != (end_ns is None):
        raise click.UsageError("give both --start-ns and --end-ns, or neither")
    body = {"labels": [_label(pair, start_ns, end_ns) for pair in pairs]}
    client = ServiceClient.for_state(build_settings(state_dir))
    done = client.post_json(f"/v1/episodes/{episode_id}/labels", body)
    emit(done, as_json, _describe(done["labels"]))


@labels.command("list")
@STATE_DIR
@JSON
@click.argument("episode_id")
def list_(state_dir: Path | None, as_json: bool, episode_id: str) -> None:
    """An episode's labels, oldest first."""
    client = ServiceClient.for_state(build_settings(state_dir))
    found = client.get_json(f"/v1/episodes/{episode_id}/labels")
    emit(found, as_json, _describe(found["labels"]) if found["labels"] else "no labels")


@labels.command()
@STATE_DIR
@JSON
@click.argument("episode_id")
@click.argument("label_id", type=click.IntRange(1))
def rm(state_dir: Path | None, as_json: bool, episode_id: str, label_id: int) -> None:
    """Remove label LABEL_ID (see `quarry labels list`) from an episode."""
    client = ServiceClient.for_state(build_settings(state_dir))
    gone = client.delete_json(f"/v1/episodes/{episode_id}/labels/{label_id}")
    emit(gone, as_json, f"removed label {gone['id']} ({gone['key']}={gone['value']})")


def _label(pair: str, start_ns: int | None, end_ns: int | None) -> dict[str, Any]:
    key, sep, value = pair.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="KEY=VALUE")
    return {"key": key, "value": value, "start_ns": start_ns, "end_ns": end_ns}


def _describe(rows: list[dict[str, Any]]) -> str:
    return table(_COLUMNS, [[row[c] for c in _COLUMNS] for row in rows])


def register(group: click.Group) -> None:
    group.add_command(labels)
