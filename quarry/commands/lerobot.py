"""``quarry ingest lerobot`` and ``quarry export lerobot``: LeRobot v3.0 datasets in and out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import psycopg

from episodes.errors import EpisodeError
from episodes.lerobot.ingest import LeRobotOptions, ingest_episode, select_episodes
from episodes.lerobot.source import ROLES, LeRobotSource
from episodes.lerobot.writer import CODECS
from loader.export import ExportOptions, export_lerobot
from manifests.manifest import open_manifest
from quarry.client import node_manifest
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.commands.episodes import service_error
from quarry.commands.ingest import _error_row, _result_row
from quarry.errors import BadInputError


def parse_indices(text: str | None) -> list[int] | None:
    """``"0,3-7"`` -> ``[0, 3, 4, 5, 6, 7]``; ``None`` stays ``None`` (every episode)."""
    if text is None:
        return None
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise BadInputError(f"--episodes: {part!r} is not N or N-M") from None
        if first < 0 or last < first:
            raise BadInputError(f"--episodes: {part!r} is not an increasing range")
        out.extend(range(first, last + 1))
    return out


def parse_roles(pairs: tuple[str, ...]) -> dict[str, str]:
    """``("observation.velocity=joint_velocities",)`` -> a feature-to-role mapping."""
    roles: dict[str, str] = {}
    for pair in pairs:
        key, sep, role = pair.partition("=")
        if not sep or not key or role not in ROLES:
            raise BadInputError(
                f"--feature {pair!r}: expected KEY=ROLE, ROLE one of {', '.join(ROLES)}"
            )
        roles[key] = role
    return roles


def ingest_dataset(
    conn: psycopg.Connection[Any],
    objects: Path,
    dataset: str,
    robot: str | None,
    wanted: str | None,
    repo_id: str | None,
    features: tuple[str, ...],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ingest the episodes asked for, one at a time: result rows and error rows."""
    indices = parse_indices(wanted)
    roles = parse_roles(features)
    try:
        source = LeRobotSource(dataset, roles)
        metas = select_episodes(source, indices)
    except EpisodeError as error:
        raise service_error(error) from error
    local = "://" not in dataset
    options = LeRobotOptions(
        robot=robot, source=repo_id or (str(Path(dataset).resolve()) if local else dataset)
    )
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for meta in metas:
        where = f"{dataset}#episode={meta.index}"
        try:
            result = ingest_episode(conn, objects, source, meta, options)
        except EpisodeError as error:
            errors.append(_error_row(where, error))
            continue
        results.append({"path": where, "episode_index": meta.index, **_result_row(result)})
    return results, errors


@click.group()
def export() -> None:
    """Write curated episodes out in other tools' formats."""


@export.command("lerobot")
@STATE_DIR
@JSON
@click.option("--manifest", "manifest_id", required=True, help="Manifest ID to export.")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--codec",
    type=click.Choice(sorted(CODECS)),
    default="h264",
    show_default=True,
    help="Video codec of the dataset's cameras.",
)
@click.option(
    "--fps",
    type=click.IntRange(1, 1000),
    help="Frame rate of the dataset (default: the episodes' control rate when they share "
    "one, else the manifest's).",
)
@click.option(
    "--cameras",
    help="Cameras to export, short names (front,wrist); needed when episodes' sets differ.",
)
def export_lerobot_command(
    state_dir: Path | None,
    as_json: bool,
    manifest_id: str,
    out: Path,
    codec: str,
    fps: int | None,
    cameras: str | None,
) -> None:
    """Write a manifest's episodes as a LeRobot v3.0 dataset in OUT (a new folder).

    lerobot's LeRobotDataset(repo_id=..., root=OUT) then reads it offline. Each manifest row
    becomes one episode, resampled to one fps; meta/info.json records the manifest ID, its
    snapshot and CDC position under "quarry".
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInputError(f"{out} exists and is not an empty folder: name a new one")
    settings = build_settings(state_dir)
    path = node_manifest(settings, manifest_id)
    picked = tuple(c.strip() for c in cameras.split(",") if c.strip()) if cameras else None
    options = ExportOptions(codec=codec, fps=fps, cameras=picked)
    result = export_lerobot(open_manifest(path), out, options)
    emit(
        result.to_dict(),
        as_json,
        f"exported {result.episodes} episodes, {result.frames} frames at {result.fps} fps "
        f"({', '.join(result.cameras)}) to {result.out}",
    )


def register(group: click.Group) -> None:
    group.add_command(export)
