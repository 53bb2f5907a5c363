"""Export a manifest's episodes as a LeRobot v3.0 dataset (``quarry export lerobot``).

Each manifest row (an episode slice ``[start_ns, end_ns)``) becomes one LeRobot episode,
resampled onto one frame grid ``start_ns + k / fps`` (``fps`` by default the episodes' control
rate when they share one, else the manifest's): at each step the newest state and
action samples and camera frames at or before it (the first ones before the first sample).
The state is the sample's state vector (joint positions, velocities, gripper, in that order);
cameras ``/cam/<name>`` become ``observation.images.<name>``; the task string is the episode's
instruction, else its task description, else its task id. A LeRobot dataset has the same
features in every episode: a manifest that mixes camera sets, frame sizes or state sizes is
refused, naming them, unless ``cameras`` picks a set every episode has (state sizes cannot be
picked). ``meta/info.json`` records the manifest ID, snapshot and CDC position under
``quarry``; ``meta/stats.json`` holds the manifest's normalization statistics.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from episodes.episode import ACTIONS
from episodes.errors import EpisodeError
from episodes.info import TopicInfo
from episodes.lerobot.ingest import CAMERA_PREFIX
from episodes.lerobot.writer import DatasetShape, ExportEpisode, write_dataset
from episodes.reader import EpisodeReader
from loader.errors import LoaderError
from loader.store import ObjectStore
from manifests.manifest import Manifest


class ExportError(LoaderError):
    """A manifest cannot be written as one LeRobot dataset as asked."""


@dataclass(frozen=True)
class ExportOptions:
    """``codec`` h264 or av1; ``fps`` default the episodes' control rate; ``cameras`` (short
    names, ``front``) default every episode's camera set, which must then be the same."""

    codec: str = "h264"
    fps: int | None = None
    cameras: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ExportResult:
    """What was written: episodes, frames, and the features."""

    out: str
    episodes: int
    frames: int
    cameras: tuple[str, ...]
    state_dim: int
    action_dim: int
    fps: int

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def camera_key(topic: str) -> str:
    """``/cam/front`` -> ``observation.images.front``."""
    return CAMERA_PREFIX + topic.rsplit("/", 1)[-1]


def export_lerobot(
    manifest: Manifest, out: Path, options: ExportOptions, store: ObjectStore | None = None
) -> ExportResult:
    """Write ``manifest`` as a LeRobot dataset under ``out`` (module docstring)."""
    store = store or ObjectStore()
    rows = list(_rows(manifest))
    if not rows:
        raise ExportError("the manifest has no episodes to export")
    readers = [_open(store, row["uri"], row["episode_id"]) for row in rows]
    try:
        fps = options.fps or _control_hz(manifest, readers)
        shape = _shape(readers, rows, options, fps)
        episodes = [_episode(r, row, shape) for r, row in zip(readers, rows, strict=True)]
    finally:
        for reader in readers:
            reader.close()
    extra = {
        "quarry": {
            "manifest_id": manifest.manifest_id,
            "snapshot_id": manifest.snapshot_id,
            "cdc_position": manifest.cdc_position,
            "sql": manifest.sql,
        }
    }
    _write_whole(out, shape, episodes, _stats(manifest, shape), extra)
    return ExportResult(
        str(out),
        len(episodes),
        sum(e.length for e in episodes),
        tuple(shape.cameras),
        len(shape.state_names),
        len(shape.action_names),
        fps,
    )


def _write_whole(
    out: Path,
    shape: DatasetShape,
    episodes: list[ExportEpisode],
    stats: dict[str, dict[str, list[float]]],
    extra: dict[str, Any],
) -> None:
    """Write the dataset in a temporary sibling folder, then rename it to ``out`` (which must
    be missing or empty), so a failed export leaves no half dataset behind."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: name a new one")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as folder:
        partial = Path(folder) / "dataset"
        try:
            write_dataset(partial, shape, episodes, stats, extra)
        except EpisodeError as error:
            raise ExportError(str(error)) from error
        if out.exists():
            out.rmdir()
        partial.rename(out)


def _rows(manifest: Manifest) -> Iterator[dict[str, Any]]:
    for index in range(manifest.num_batches):
        batch = manifest.batch(index).select(["episode_id", "uri", "start_ns", "end_ns"])
        yield from batch.to_pylist()


def _open(store: ObjectStore, uri: str, episode_id: str) -> EpisodeReader:
    try:
        return EpisodeReader(store.open(uri), name=uri)
    except EpisodeError as error:
        raise ExportError(str(error), uri=uri, episode_id=episode_id) from error


def _control_hz(manifest: Manifest, readers: list[EpisodeReader]) -> int:
    """The episodes' control rate when they share one, else the manifest's (its sample
    spec's), in Hz."""
    rates = {r.info.control_hz for r in readers}
    rate = rates.pop() if len(rates) == 1 else manifest.sample_spec.get("control_hz", 50.0)
    return round(float(rate))


def _shape(
    readers: list[EpisodeReader], rows: list[dict[str, Any]], options: ExportOptions, fps: int
) -> DatasetShape:
    keys = _camera_keys(readers, rows, options.cameras)
    states = [tuple(n for t in r.info.state_topics() for n in t.names) for r in readers]
    actions = [_names(r.info.vector(ACTIONS)) for r in readers]
    sizes = ({len(s) for s in states}, {len(a) for a in actions})
    if len(sizes[0]) > 1 or len(sizes[1]) > 1:
        raise ExportError(
            f"the manifest mixes state sizes {sorted(sizes[0])} or action sizes "
            f"{sorted(sizes[1])}: export one robot's episodes at a time (curate by robot_id)"
        )
    robot_types = sorted({str(r.info.episode.get("robot_model", "")) for r in readers})
    return DatasetShape(
        fps=fps,
        robot_type=robot_types[0] if len(robot_types) == 1 else "mixed",
        cameras=_frame_sizes(readers, keys),
        state_names=states[0],
        action_names=actions[0],
        codec=options.codec,
    )


def _camera_keys(
    readers: list[EpisodeReader], rows: list[dict[str, Any]], picked: tuple[str, ...] | None
) -> tuple[str, ...]:
    """The cameras to export: every episode's (which must be one set), or ``picked``."""
    have = [{camera_key(c.topic) for c in r.info.cameras} for r in readers]
    sets = {tuple(sorted(h)) for h in have}
    if picked is None:
        if len(sets) > 1:
            raise ExportError(
                f"the manifest mixes camera sets {_named(sets)}: a LeRobot dataset has one; "
                "pick a common set with --cameras (short names, e.g. --cameras front,wrist)"
            )
        return next(iter(sets))
    keys = tuple(sorted(CAMERA_PREFIX + name for name in picked))
    lacking = [row["episode_id"] for h, row in zip(have, rows, strict=True) if not set(keys) <= h]
    if lacking:
        raise ExportError(
            f"--cameras {','.join(picked)}: {len(lacking)} episodes lack some of them "
            f"(first {lacking[0]}); the camera sets are {_named(sets)}",
            episode_id=lacking[0],
        )
    return keys


def _frame_sizes(readers: list[EpisodeReader], keys: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    sizes: dict[str, set[tuple[int, int]]] = {k: set() for k in keys}
    for reader in readers:
        for cam in reader.info.cameras:
            key = camera_key(cam.topic)
            if key in sizes:
                sizes[key].add((int(cam.schema["height"]), int(cam.schema["width"])))
    mixed = {k: sorted(v) for k, v in sizes.items() if len(v) > 1}
    if mixed:
        raise ExportError(f"cameras with more than one frame size (height, width): {mixed}")
    return {k: next(iter(v)) for k, v in sizes.items()}


def _names(topic: TopicInfo | None) -> tuple[str, ...]:
    return () if topic is None else topic.names


def _named(sets: set[tuple[str, ...]]) -> str:
    return " and ".join(
        "[" + ", ".join(k.removeprefix(CAMERA_PREFIX) for k in s) + "]" for s in sorted(sets)
    )


def _episode(reader: EpisodeReader, row: dict[str, Any], shape: DatasetShape) -> ExportEpisode:
    start, end = int(row["start_ns"]), int(row["end_ns"])
    period = 1e9 / shape.fps
    grid = start + np.round(np.arange(int(np.ceil((end - start) / period))) * period).astype(
        np.int64
    )
    grid = grid[grid < end]
    info = reader.info
    state_parts = [_hold(*reader.read_vectors(t.topic), grid) for t in info.state_topics()]
    actions = info.vector(ACTIONS)
    action = (
        _hold(*reader.read_vectors(actions.topic), grid)
        if actions is not None
        else np.zeros((len(grid), 0), dtype=np.float32)
    )
    frames = {}
    for cam in info.cameras:
        key = camera_key(cam.topic)
        if key in shape.cameras:
            frames[key] = _frames(reader, cam.topic, grid, shape.cameras[key])
    episode = info.episode
    task = str(episode.get("instruction") or episode.get("task_description") or episode["task_id"])
    state = np.concatenate(state_parts, axis=1) if state_parts else np.zeros((len(grid), 0))
    return ExportEpisode(frames, state.astype(np.float32), action.astype(np.float32), task)


def _hold(
    times: npt.NDArray[np.int64], values: npt.NDArray[np.float32], grid: npt.NDArray[np.int64]
) -> npt.NDArray[np.float32]:
    """The newest sample at or before each grid time (the first sample before it)."""
    order = np.argsort(times, kind="stable")
    picks = np.searchsorted(times[order], grid, side="right") - 1
    return values[order][np.clip(picks, 0, len(times) - 1)]


def _frames(
    reader: EpisodeReader, topic: str, grid: npt.NDArray[np.int64], size: tuple[int, int]
) -> npt.NDArray[np.uint8]:
    times, images = [], []
    for header, image in reader.iter_frames(topic):
        times.append(header.time_ns)
        images.append(image if image is not None else np.zeros((*size, 3), dtype=np.uint8))
    picks = np.searchsorted(np.asarray(times, dtype=np.int64), grid, side="right") - 1
    return np.stack([images[i] for i in np.clip(picks, 0, len(images) - 1)])


def _stats(manifest: Manifest, shape: DatasetShape) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for field, key in (("state", "observation.state"), ("action", "action")):
        stats = manifest.field_stats(field)
        if stats is None:
            continue
        entry = {"mean": list(stats.mean()), "std": list(stats.std()), "count": [stats.count]}
        if stats.min is not None and stats.max is not None:
            entry.update(min=list(stats.min), max=list(stats.max))
        out[key] = {k: [float(x) for x in v] for k, v in entry.items()}
    return out
