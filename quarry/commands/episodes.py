"""``quarry episodes inspect``: what a container holds, read from the container itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from episodes.errors import EpisodeError, SourceError
from episodes.inspection import inspect as inspect_container
from quarry.commands._common import JSON, STATE_DIR, emit
from quarry.errors import BadInputError, NotFoundError, QuarryError, StackError


def service_error(error: EpisodeError) -> QuarryError:
    """The CLI's form of an episodes error: a missing file is 4, a retryable failure 3, bad
    input 2; the message keeps the file, topic and byte offset."""
    context = {"file": error.file, "topic": error.topic, "offset": error.offset}
    if isinstance(error, SourceError) and not error.retryable:
        return NotFoundError(str(error), **context)
    if error.retryable:
        return StackError(str(error), **context)
    return BadInputError(str(error), **context)


@click.group()
def episodes() -> None:
    """Look inside episode containers."""


@episodes.command()
@STATE_DIR
@JSON
@click.argument("uri")
@click.option("--no-qc", "skip_qc", is_flag=True, help="Skip the QC pass (no frame decoding).")
def inspect(state_dir: Path | None, as_json: bool, uri: str, skip_qc: bool) -> None:
    """Topics, rates, groups, chunks, stamps and QC flags of the container at URI.

    URI is a path, a file:// URI or any fsspec URI (s3://...).
    """
    del state_dir  # accepted like every command's; a container is read where it lies
    try:
        described = inspect_container(uri, quality=not skip_qc)
    except EpisodeError as error:
        raise service_error(error) from error
    emit(described, as_json, describe(described))


def describe(info: dict[str, Any]) -> str:
    """A few lines a person can read: the episode, its stamps, topics and chunks."""
    ep, stamps, layout = info["episode"], info["stamps"], info["layout"]
    seconds = (ep["end_ns"] - ep["start_ns"]) / 1e9
    lines = [
        f"uri       {info['uri']} ({info['size_bytes'] / 1e6:.2f} MB)",
        f"episode   {ep['episode_id']}  robot {ep['robot_id']}  task {ep['task_id']}",
        f"time      {ep['start_ns']} .. {ep['end_ns']} ns ({seconds:.2f} s), "
        f"{ep['steps']} steps at {ep['control_hz']:g} Hz",
        "stamps    " + "  ".join(f"{k} {v}" for k, v in stamps.items()),
        f"layout    {layout['name']}, window {layout['window_ns'] / 1e9:g} s, "
        f"{len(info['chunks'])} chunks, video {layout['video'].get('codec', '-')}",
    ]
    for topic in info["topics"]:
        lines.append(
            f"  {topic['topic']:<28} {topic['kind']:<17} {topic['group']:<8} "
            f"{topic['rate_hz']:>7g} Hz {topic['messages'] or 0:>7} msgs"
        )
    if "quality" in info:
        lines.append("qc flags  " + (", ".join(info["quality"]["flags"]) or "none"))
    return "\n".join(lines)


def register(group: click.Group) -> None:
    group.add_command(episodes)
