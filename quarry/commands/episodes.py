"""``quarry episodes list | show | retract | restore`` (through the running service, over
the operational database: retracted episodes included) and ``quarry episodes inspect``
(what a container or any other MCAP recording holds, read from the file itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import psycopg

from curation.container_gc import GRACE_S, collect_containers
from episodes.errors import ContainerError, EpisodeError, SourceError
from episodes.inspection import inspect as inspect_container
from episodes.survey import survey
from quarry.client import ServiceClient
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit, table
from quarry.commands._recording import describe_recording, write_mapping
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
    """List, describe, retract and restore episodes; look inside their containers."""


@episodes.command("list")
@STATE_DIR
@JSON
@click.option("--robot", "robot_id", help="Only this robot's episodes.")
@click.option("--task", "task_id", help="Only this task's episodes.")
@click.option("--status", type=click.Choice(["active", "retracted"]), help="Only these.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--cursor", help="Continue after the previous page (its next_cursor).")
def list_(state_dir: Path | None, as_json: bool, limit: int, **filters: str | None) -> None:
    """Episodes by id, retracted ones included unless --status says."""
    params = {k: v for k, v in filters.items() if v is not None}
    client = ServiceClient.for_state(build_settings(state_dir))
    page = client.get_json("/v1/episodes", limit=limit, **params)
    columns = ["id", "robot_id", "task_id", "status", "success", "steps", "started_at"]
    text = table(columns, [[e[c] for c in columns] for e in page["items"]])
    if not page["items"]:
        text = "no episodes"
    if page["next_cursor"]:
        text += f"\nmore: --cursor {page['next_cursor']}"
    emit(page, as_json, text)


@episodes.command()
@STATE_DIR
@JSON
@click.argument("episode_id")
def show(state_dir: Path | None, as_json: bool, episode_id: str) -> None:
    """One episode: robot, task, times, container, stamps, QC flags, retractions."""
    client = ServiceClient.for_state(build_settings(state_dir))
    detail = client.get_json(f"/v1/episodes/{episode_id}")
    emit(detail, as_json, describe_episode(detail))


@episodes.command()
@STATE_DIR
@JSON
@click.argument("episode_id")
@click.option("--reason", default="", help="Why (kept in the retraction log).")
def retract(state_dir: Path | None, as_json: bool, episode_id: str, reason: str) -> None:
    """Take an episode out of every new curation; list the manifests that already hold it."""
    client = ServiceClient.for_state(build_settings(state_dir))
    done = client.post_json(f"/v1/episodes/{episode_id}/retract", {"reason": reason})
    held = [m["id"] for m in done["manifests"]]
    verb = "was already retracted" if done["already_retracted"] else "retracted"
    count = f"{len(held)} manifest{'' if len(held) == 1 else 's'}"
    lines = [f"episode {done['episode_id']} {verb}; {count} hold{'s' if len(held) == 1 else ''} it"]
    lines += [f"  {manifest_id}" for manifest_id in held]
    emit(done, as_json, "\n".join(lines))


@episodes.command()
@STATE_DIR
@JSON
@click.argument("episode_id")
def restore(state_dir: Path | None, as_json: bool, episode_id: str) -> None:
    """Undo a retraction: the episode is back in new curations once CDC carries it."""
    client = ServiceClient.for_state(build_settings(state_dir))
    done = client.post_json(f"/v1/episodes/{episode_id}/restore", {})
    verb = "was not retracted" if done["already_active"] else "restored"
    emit(done, as_json, f"episode {done['episode_id']} {verb}")


@episodes.command()
@STATE_DIR
@JSON
@click.argument("uri")
@click.option("--no-qc", "skip_qc", is_flag=True, help="Skip the QC pass (no frame decoding).")
@click.option(
    "--suggest-mapping",
    "suggest_to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the mapping `ingest mcap` needs for a foreign recording (TOML for .toml, "
    "else JSON).",
)
def inspect(
    state_dir: Path | None, as_json: bool, uri: str, skip_qc: bool, suggest_to: Path | None
) -> None:
    """Topics, rates, groups, chunks, stamps and QC flags of the container at URI.

    URI is a path, a file:// URI or any fsspec URI (s3://...). A local MCAP file that is not
    a Quarry container (ROS 2, Foxglove, ...) is described as `mcap info` does: topics,
    schemas and encodings, message counts, rates, time range, chunks, compression, whether
    it is indexed, and the mapping `ingest mcap` would use. A recording cut off at the tail
    is described up to the cut, and the exit code is 2.
    """
    del state_dir  # accepted like every command's; a container is read where it lies
    try:
        described = inspect_container(uri, quality=not skip_qc)
    except EpisodeError as error:
        local = Path(uri.removeprefix("file://"))
        if not local.is_file():
            raise service_error(error) from error
        _inspect_recording(local, error, as_json, suggest_to)
        return
    if suggest_to is not None:
        raise BadInputError(
            f"{uri} is a Quarry container, which needs no mapping: --suggest-mapping is for "
            "other recordings"
        )
    emit(described, as_json, describe(described))


def _inspect_recording(
    path: Path, quarry_error: EpisodeError, as_json: bool, suggest_to: Path | None
) -> None:
    """Describe a foreign recording; a damaged Quarry container keeps its own error."""
    try:
        described = survey(path)
    except EpisodeError as error:
        raise service_error(error) from error
    if described["format"] == "quarry":
        raise service_error(quarry_error) from quarry_error
    if suggest_to is not None:
        write_mapping(described, suggest_to)
    emit(described, as_json, describe_recording(described))
    damage = described["damage"]
    if damage is not None:
        cut = ContainerError(
            f"recording truncated: {damage['reason']}; `quarry ingest mcap --salvage` "
            "ingests the whole records before it",
            file=str(path),
            offset=damage["offset"],
        )
        raise service_error(cut)


def describe_episode(ep: dict[str, Any]) -> str:
    """An episode's registry row in a few lines."""
    seconds = (ep["end_ns"] - ep["start_ns"]) / 1e9
    lines = [
        f"episode   {ep['id']}  {ep['status']}",
        f"robot     {ep['robot_id']}  task {ep['task_id']}  site {ep['site']}  "
        f"operator {ep['operator']}",
        f"recorded  {ep['started_at']} .. {ep['ended_at']} ({seconds:.2f} s, "
        f"{ep['steps']} steps at {ep['control_hz']:g} Hz), success {ep['success']}",
        f"container {ep['uri']} ({ep['size_bytes'] / 1e6:.2f} MB, sha256 {ep['sha256'][:16]}...)",
        f"stamps    schema {ep['schema_version']}  pipeline {ep['pipeline_version']}  "
        f"robot_sw {ep['robot_sw_version']}",
        f"qc flags  {', '.join(ep['quality_flags']) or 'none'}",
        f"labels    {ep['labels']}  manifests {ep['manifests']}",
    ]
    if ep.get("instruction"):
        lines.insert(2, f"instruct  {ep['instruction']}")
    lines += [
        f"retracted {r['created_at']} by {r['author']}: {r['reason'] or '(no reason)'}"
        for r in ep["retractions"]
    ]
    return "\n".join(lines)


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


@episodes.command()
@STATE_DIR
@JSON
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@click.option(
    "--grace",
    "grace_s",
    type=click.FloatRange(0, None),
    default=GRACE_S,
    show_default=True,
    help="Seconds a version stays after it was superseded, whatever the lineage says.",
)
def gc(state_dir: Path | None, as_json: bool, dry_run: bool, grace_s: float) -> None:
    """Delete superseded container versions (left by reprocessing) that no registered
    manifest lists; the versions manifests list stay, so those manifests still rebuild."""
    from service.manifest_files import manifest_place  # the service's stores, and duckdb:
    from warehouse.backends import open_warehouse  # loaded by this command only

    settings = build_settings(state_dir)
    try:
        with (
            psycopg.connect(settings.operational_dsn(), autocommit=True) as conn,
            open_warehouse(settings.warehouse_config()) as warehouse,
        ):
            place = manifest_place(settings.service_settings())
            report = collect_containers(conn, warehouse, place, grace_s=grace_s, dry_run=dry_run)
    except psycopg.OperationalError as error:
        raise StackError(f"operational database unreachable ({error}): run `quarry up`") from None
    verb = "would delete" if dry_run else "deleted"
    emit(
        report.to_dict(),
        as_json,
        f"{verb} {len(report.deleted)} container versions ({report.freed_bytes / 1e6:.1f} MB); "
        f"kept {len(report.kept)} that manifests list",
    )


def register(group: click.Group) -> None:
    group.add_command(episodes)
