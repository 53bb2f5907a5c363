"""Ingest a LeRobot v3.0 dataset: each LeRobot episode becomes one Quarry episode.

For each episode (all, or those asked for): its data rows (``observation.state``, ``action`` and
any numeric feature the roles map) become vector topics ``/lerobot/<key>`` sampled at the
frame times ``start + frame_index / fps``, every video feature is decoded with PyAV and
re-encoded as camera ``/cam/<name>`` (``observation.images.<name>``), the episode's task string
is its instruction, fps and ``robot_type`` come from ``info.json``. The log time of each
episode starts at 0 (LeRobot records no wall clock). Everything is read and checked before the
container is written, and it is registered in one transaction: an episode is registered whole
or not at all. The episode id is UUIDv5 of the episode's content (rows, task, fps), so the same
dataset from another folder or from S3 registers nothing twice.

QC flags and statistics are computed from the written container as for every episode;
LeRobot's own per-episode statistics (min, max, mean of each mapped feature) are checked
against them and a difference raises the QC flag ``lerobot_stats_mismatch``.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
import pyarrow as pa

from episodes.episode import VECTOR_KINDS, CameraStream, EpisodeData, Stamps, VectorStream
from episodes.errors import EpisodeError, InputError
from episodes.ingest import IngestResult, existing_result, register, store_episode
from episodes.quality import QualityReport
from episodes.registry import registered_ids
from episodes.stats import ACTION_FIELD, STATE_FIELD, DimStats
from episodes.writer import WriteOptions

from .source import EpisodeMeta, Feature, LeRobotSource
from .video import decode_span

STATS_MISMATCH = "lerobot_stats_mismatch"
CAMERA_PREFIX = "observation.images."
_NAMESPACE = uuid.UUID("6f1c2a4e-8d3b-4b7a-9e15-2c4d8a6b0f37")
# LeRobot's stats are float64 of float32 data: they agree with Quarry's to float32 precision.
_RELATIVE_TOLERANCE = 1e-5


@dataclass(frozen=True)
class LeRobotOptions:
    """What the command line may set: ``robot`` overrides ``robot_type``; ``source`` names
    the dataset in stamps (its repo id, else the path or URL given)."""

    robot: str | None = None
    source: str | None = None
    window_s: float = 2.0


def camera_topic(key: str) -> str:
    """The container topic of a LeRobot video feature: ``observation.images.x`` -> ``/cam/x``."""
    return "/cam/" + (key[len(CAMERA_PREFIX) :] if key.startswith(CAMERA_PREFIX) else key)


def task_id(task: str) -> str:
    """A readable task id from a task string: ``"Pick up the cube"`` -> ``pick-up-the-cube``."""
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:60]
    digest = hashlib.sha256(task.encode()).hexdigest()[:8]
    return f"{slug or 'task'}-{digest}"


def select_episodes(source: LeRobotSource, wanted: list[int] | None) -> list[EpisodeMeta]:
    """The episodes asked for (all when ``wanted`` is None); an unknown index is refused."""
    if wanted is None:
        return source.episodes
    known = {e.index: e for e in source.episodes}
    missing = sorted(set(wanted) - set(known))
    if missing:
        raise InputError(
            f"episodes {missing} are not in the dataset (it has {len(known)})",
            file=source.display("meta/episodes/"),
        )
    return [known[i] for i in sorted(set(wanted))]


def ingest_episode(
    conn: psycopg.Connection[Any],
    objects_root: Path,
    source: LeRobotSource,
    meta: EpisodeMeta,
    options: LeRobotOptions,
) -> IngestResult:
    """Read, check, write and register one LeRobot episode (module docstring)."""
    rows = source.episode_rows(meta)
    episode_id = _episode_id(source, meta, rows)
    if registered_ids(conn, [episode_id]):
        return existing_result(conn, episode_id)
    episode = read_episode(source, meta, rows, episode_id, options)
    prepared = store_episode(episode, objects_root, WriteOptions(window_s=options.window_s))
    check_stats(prepared.quality, prepared.stats, source, meta)
    return register(conn, prepared)


def read_episode(
    source: LeRobotSource,
    meta: EpisodeMeta,
    rows: pa.Table,
    episode_id: str,
    options: LeRobotOptions,
) -> EpisodeData:
    """The episode in memory, every row and frame checked against the episode's length."""
    where = f"episode {meta.index}"
    if rows.num_rows != meta.length:
        raise InputError(
            f"{where}: {rows.num_rows} data rows, the episodes metadata says {meta.length}",
            file=source.display(meta.data_file),
        )
    period = round(1e9 / source.fps)
    times = np.asarray(rows["frame_index"].to_numpy(), dtype=np.int64) * period
    vectors = [_vector(source, meta, rows, f, times) for f in source.vectors]
    cameras = [_camera(source, meta, key, times) for key in source.cameras]
    task = meta.tasks[0] if meta.tasks else ""
    label = options.source or source.url
    return EpisodeData(
        episode_id=episode_id,
        robot_id=options.robot or source.robot_type,
        robot_model=source.robot_type,
        task_id=task_id(task),
        task_description=task,
        site="",
        operator="",
        start_ns=0,
        end_ns=int(times[-1]) + period if len(times) else period,
        control_hz=source.fps,
        success=bool(meta.success),
        cameras=cameras,
        vectors=vectors,
        stamps=Stamps(robot_sw_version=f"lerobot:{label}@{source.version}"),
        extra={
            "source": f"lerobot:{label}@{source.version}",
            "lerobot_episode_index": str(meta.index),
            "lerobot_features": json.dumps({v.key: v.role for v in source.vectors}, sort_keys=True),
        },
        instruction=task,
    )


def _vector(
    source: LeRobotSource,
    meta: EpisodeMeta,
    rows: pa.Table,
    feature: Feature,
    times: npt.NDArray[np.int64],
) -> VectorStream:
    column = rows[feature.key].combine_chunks()
    values = np.asarray(column.to_numpy(zero_copy_only=False).tolist(), dtype=np.float32)
    values = values.reshape(len(times), len(feature.names))
    return VectorStream(
        f"/lerobot/{feature.key}", feature.role, source.fps, feature.names, times, values
    )


def _camera(
    source: LeRobotSource, meta: EpisodeMeta, key: str, times: npt.NDArray[np.int64]
) -> CameraStream:
    file, from_s, to_s = meta.videos[key]
    try:
        with source.open(file) as stream:
            frames = decode_span(stream, from_s, to_s, source.fps, name=source.display(file))
    except EpisodeError as error:
        error.message = f"episode {meta.index}: {error.message}"
        error.topic = key
        raise
    if len(frames) != len(times):
        raise InputError(
            f"episode {meta.index}: {len(frames)} video frames in [{from_s}, {to_s}) s, "
            f"{len(times)} data rows",
            file=source.display(file),
            topic=key,
        )
    return CameraStream(camera_topic(key), source.fps, times, frames)


def _episode_id(source: LeRobotSource, meta: EpisodeMeta, rows: pa.Table) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([source.fps, list(meta.tasks), meta.length]).encode())
    for feature in source.vectors:
        digest.update(feature.key.encode())
        for chunk in rows[feature.key].combine_chunks().flatten().buffers():
            if chunk is not None:
                digest.update(chunk)
    return str(uuid.uuid5(_NAMESPACE, f"lerobot/{digest.hexdigest()}"))


def check_stats(
    quality: QualityReport, stats: list[DimStats], source: LeRobotSource, meta: EpisodeMeta
) -> None:
    """Compare LeRobot's per-episode min, max and mean with Quarry's; flag any difference."""
    ours = {(s.field, s.dim): s for s in stats}
    offsets = {STATE_FIELD: 0, ACTION_FIELD: 0}
    differences = []
    for feature in sorted(source.vectors, key=lambda f: VECTOR_KINDS.index(f.role)):
        field = ACTION_FIELD if feature.role == "actions" else STATE_FIELD
        theirs = meta.stats.get(feature.key, {})
        for dim in range(len(feature.names)):
            mine = ours.get((field, offsets[field] + dim))
            for name in ("min", "max", "mean"):
                values = theirs.get(name) or []
                if mine is None or dim >= len(values):
                    continue
                have = {"min": mine.min, "max": mine.max, "mean": mine.mean}[name]
                if abs(have - values[dim]) > _RELATIVE_TOLERANCE * max(1.0, abs(values[dim])):
                    differences.append(
                        {
                            "feature": feature.key,
                            "dim": dim,
                            "stat": name,
                            "lerobot": values[dim],
                            "quarry": have,
                        }
                    )
        offsets[field] += len(feature.names)
    quality.report["lerobot_stats"] = {"checked": True, "differences": len(differences)}
    if differences:
        quality.raise_flag(STATS_MISMATCH, {"episode": meta.index, "differences": differences[:20]})
    quality.report["flags"] = quality.flag_names
