"""``quarry ingest synth``, ``ingest mcap`` and ``ingest lerobot``: write containers, register
episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import psycopg

from episodes.episode import PIPELINE_VERSION
from episodes.errors import EpisodeError
from episodes.foreign import ingest_recording
from episodes.ingest import IngestResult, ingest_synth
from episodes.mapping import Mapping, load_mapping
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.commands.episodes import service_error
from quarry.errors import BadInputError, StackError
from quarry.progress import Progress
from quarry.stack.postgres import OPERATIONAL_DB, EmbeddedPostgres


@click.group()
def ingest() -> None:
    """Bring episodes into the object store and the operational database."""


@ingest.command()
@STATE_DIR
@JSON
@click.option(
    "--episodes",
    "count",
    type=click.IntRange(1, 1_000_000),
    required=True,
    help="How many synthetic episodes to generate.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Fleet seed; the same (seed, index) always gives the same episode.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Generator processes (default: CPU count, at most 4).",
)
@click.option(
    "--pipeline-version",
    type=click.IntRange(0, None),
    default=PIPELINE_VERSION,
    show_default=True,
    help="Stamp written on the episodes (an older one makes stale episodes, to reprocess).",
)
def synth(
    state_dir: Path | None,
    as_json: bool,
    count: int,
    seed: int,
    workers: int | None,
    pipeline_version: int,
) -> None:
    """Generate a synthetic teleoperation fleet, write MCAP containers and register them."""
    settings = build_settings(state_dir)
    paths = settings.paths
    dsn = EmbeddedPostgres(paths).dsn(OPERATIONAL_DB)
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        Progress("ingest", "episodes", enabled=not as_json) as hook,
    ):
        results = ingest_synth(
            conn,
            paths.objects,
            count,
            seed,
            progress=hook,
            workers=workers,
            pipeline_version=pipeline_version,
        )
        summary = _summarize(conn, results)
    emit(
        summary,
        as_json,
        f"ingested {summary['registered']} new episodes "
        f"({summary['skipped']} already there), "
        f"{summary['hours']:.2f} h, {summary['bytes'] / 1e6:.1f} MB",
    )


def _summarize(
    conn: psycopg.Connection[tuple[object, ...]], results: list[IngestResult]
) -> dict[str, Any]:
    """Counts, hours of recording and bytes of what this run ingested or found."""
    ids = [r.episode_id for r in results]
    row = conn.execute(
        "SELECT coalesce(sum(end_ns - start_ns), 0) FROM episodes WHERE id = ANY(%s::uuid[])",
        (ids,),
    ).fetchone()
    seconds = float(row[0]) / 1e9 if row else 0.0  # type: ignore[arg-type]
    created = sum(r.created for r in results)
    return {
        "episodes": len(results),
        "registered": created,
        "skipped": len(results) - created,
        "hours": seconds / 3600,
        "bytes": sum(r.size_bytes for r in results),
        "flagged": sum(bool(r.flags) for r in results),
    }


@ingest.command()
@STATE_DIR
@JSON
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--robot", help="Robot id (overrides the mapping's).")
@click.option("--task", help="Task id (overrides the mapping's).")
@click.option(
    "--mapping",
    "mapping_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Topic roles, fields, rates and stamps: TOML (.toml) or JSON.",
)
@click.option("--robot-sw-version", help='Stamp (default: the mapping\'s, else "unknown").')
@click.option("--pipeline-version", type=int, help="Stamp (default: this Quarry's).")
@click.option("--schema-version", type=int, help="Stamp (default: this Quarry's).")
@click.option(
    "--salvage",
    is_flag=True,
    help="Ingest what is whole of a recording cut off at the tail (QC flag: truncated).",
)
def mcap(
    state_dir: Path | None,
    as_json: bool,
    paths: tuple[Path, ...],
    mapping_file: Path | None,
    salvage: bool,
    **overrides: Any,
) -> None:
    """Ingest MCAP recordings of other tools (ROS 2, Foxglove JSON); folders give their *.mcap.

    Each file is checked, rewritten into Quarry's layout, QC'd and registered on its own;
    bad files are reported by file, topic and byte offset, and the exit code is 2. With no
    actions topic, actions are the next control step's joint positions (QC flag:
    actions_derived). `quarry episodes inspect FILE --suggest-mapping OUT` proposes a mapping.
    """
    try:
        mapping = load_mapping(mapping_file) if mapping_file else Mapping()
    except EpisodeError as error:
        raise service_error(error) from error
    mapping = mapping.with_overrides(**overrides)
    paths_dir = build_settings(state_dir).paths
    files = _recordings(paths)
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    with _connect(EmbeddedPostgres(paths_dir).dsn(OPERATIONAL_DB)) as conn:
        for path in files:
            try:
                result = ingest_recording(conn, paths_dir.objects, path, mapping, salvage=salvage)
            except EpisodeError as error:
                errors.append(_error_row(path, error))
                continue
            results.append({"path": str(path), **_result_row(result)})
    _report(results, errors, as_json)


@ingest.command()
@STATE_DIR
@JSON
@click.argument("dataset")
@click.option("--robot", help="Robot id (default: the dataset's robot_type).")
@click.option(
    "--episodes",
    "wanted",
    help="Episode indices to ingest, e.g. 0,3-7 (default: every episode).",
)
@click.option(
    "--repo-id",
    help="The dataset's Hugging Face repo id, recorded in the source stamp "
    "(default: the path or URL given).",
)
@click.option(
    "--feature",
    "features",
    multiple=True,
    metavar="KEY=ROLE",
    help="Role of a numeric feature: joint_positions, joint_velocities, gripper, actions or "
    "ignore (default: observation.state=joint_positions, action=actions). Repeatable.",
)
def lerobot(
    state_dir: Path | None,
    as_json: bool,
    dataset: str,
    robot: str | None,
    wanted: str | None,
    repo_id: str | None,
    features: tuple[str, ...],
) -> None:
    """Ingest a LeRobot dataset (format v3.0) from a folder or an s3:// URL.

    Each LeRobot episode becomes a Quarry episode: videos decoded and re-encoded, state and
    action as vector topics, the task string as its instruction. Episodes already ingested
    are skipped; a bad episode is reported by file, episode and feature (exit code 2) and
    registers nothing.
    """
    from quarry.commands.lerobot import ingest_dataset  # it imports this module

    paths_dir = build_settings(state_dir).paths
    with _connect(EmbeddedPostgres(paths_dir).dsn(OPERATIONAL_DB)) as conn:
        results, errors = ingest_dataset(
            conn, paths_dir.objects, dataset, robot, wanted, repo_id, features
        )
    _report(results, errors, as_json)


def _recordings(paths: tuple[Path, ...]) -> list[Path]:
    """The files named, with each folder replaced by the ``*.mcap`` files under it."""
    out: list[Path] = []
    for path in paths:
        out.extend(sorted(path.rglob("*.mcap")) if path.is_dir() else [path])
    if not out:
        raise BadInputError("no .mcap files in the given folders")
    return out


def _connect(dsn: str) -> psycopg.Connection[tuple[Any, ...]]:
    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as error:
        raise StackError(f"operational database unreachable ({error}): run `quarry up`") from None


def _result_row(result: IngestResult) -> dict[str, Any]:
    return {
        "episode_id": result.episode_id,
        "uri": result.uri,
        "robot_id": result.robot_id,
        "task_id": result.task_id,
        "size_bytes": result.size_bytes,
        "sha256": result.sha256,
        "created": result.created,
        "flags": list(result.flags),
    }


def _error_row(path: Path | str, error: EpisodeError) -> dict[str, Any]:
    return {
        "path": str(path),
        "error": type(error).__name__,
        "message": error.message,
        "file": error.file,
        "topic": error.topic,
        "offset": error.offset,
        "retryable": error.retryable,
    }


def _report(results: list[dict[str, Any]], errors: list[dict[str, Any]], as_json: bool) -> None:
    created = sum(r["created"] for r in results)
    summary = {
        "files": len(results) + len(errors),
        "registered": created,
        "skipped": len(results) - created,
        "failed": len(errors),
        "results": results,
        "errors": errors,
    }
    lines = [
        f"{'registered' if r['created'] else 'skipped   '} {r['episode_id']} {r['path']}"
        + (f"  flags: {', '.join(r['flags'])}" if r["flags"] else "")
        for r in results
    ]
    lines += [f"FAILED     {e['path']}: {e['error']}: {e['message']}{_where(e)}" for e in errors]
    emit(summary, as_json, "\n".join(lines))
    if errors:
        first = errors[0]
        message = (
            f"{len(errors)} of {summary['files']} recordings not ingested; first: "
            f"{first['message']}{_where(first)}"
        )
        # Retryable failures (I/O, the database) exit like an unavailable stack: 3, else 2.
        retry = any(e["retryable"] for e in errors)
        raise StackError(message) if retry else BadInputError(message)


def _where(error: dict[str, Any]) -> str:
    named = [f"{k}={error[k]}" for k in ("file", "topic", "offset") if error[k] is not None]
    return f" ({', '.join(named)})" if named else ""


def register(group: click.Group) -> None:
    group.add_command(ingest)
