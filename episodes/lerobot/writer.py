"""Write episodes as a LeRobot v3.0 dataset that lerobot's ``LeRobotDataset`` reads.

One data file, one episodes-metadata file and one video file per camera (episodes one after
the other, each located by its ``from_timestamp``/``to_timestamp``), ``meta/tasks.parquet``
(task strings as the pandas index, as lerobot writes it), ``meta/stats.json`` and
``meta/info.json`` with the caller's extra keys. Videos are H.264 (libx264, ``crf`` 18) or AV1
(libsvtav1, ``crf`` 30, lerobot's default), ``yuv420p``, one frame per ``1 / fps`` seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import av
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
from av.video.stream import VideoStream

from episodes.errors import InputError

from .source import CODEBASE_VERSION

DATA_FILE = "data/chunk-000/file-000.parquet"
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
CODECS = {
    "h264": ("libx264", {"crf": "18", "preset": "medium", "bf": "0"}),
    "av1": ("libsvtav1", {"crf": "30", "preset": "8"}),
}


@dataclass
class ExportEpisode:
    """One episode at the dataset's fps: N frames of each camera, state and action rows."""

    frames: dict[str, npt.NDArray[np.uint8]]  # LeRobot key -> (N, H, W, 3)
    state: npt.NDArray[np.float32]  # (N, D)
    action: npt.NDArray[np.float32]  # (N, A)
    task: str

    @property
    def length(self) -> int:
        return len(self.state)


@dataclass(frozen=True)
class DatasetShape:
    """What every episode of the dataset shares."""

    fps: int
    robot_type: str
    cameras: dict[str, tuple[int, int]]  # key -> (height, width)
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    codec: str = "h264"


def write_dataset(
    root: Path,
    shape: DatasetShape,
    episodes: list[ExportEpisode],
    stats: dict[str, dict[str, list[float]]],
    extra_info: dict[str, Any],
) -> None:
    """Write the dataset under ``root`` (which must not hold one yet)."""
    if (root / "meta" / "info.json").exists():
        raise InputError("a dataset already exists there", file=str(root))
    tasks = list(dict.fromkeys(e.task for e in episodes))
    spans = _write_videos(root, shape, episodes)
    _write_data(root, shape, episodes, tasks)
    _write_episodes(root, shape, episodes, spans)
    _write_tasks(root, tasks)
    _write_json(root / "meta" / "stats.json", stats)
    info = _info(shape, episodes, len(tasks))
    info.update(extra_info)
    _write_json(root / "meta" / "info.json", info)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4) + "\n")


def _write_videos(
    root: Path, shape: DatasetShape, episodes: list[ExportEpisode]
) -> dict[str, list[tuple[float, float]]]:
    spans: dict[str, list[tuple[float, float]]] = {}
    for key, (height, width) in shape.cameras.items():
        path = root / f"videos/{key}/chunk-000/file-000.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        spans[key] = _encode(path, shape, height, width, (e.frames[key] for e in episodes))
    return spans


def _encode(
    path: Path,
    shape: DatasetShape,
    height: int,
    width: int,
    clips: Iterable[npt.NDArray[np.uint8]],
) -> list[tuple[float, float]]:
    codec, options = CODECS[shape.codec]
    spans = []
    pts = 0
    with av.open(str(path), mode="w") as container:
        stream = cast(VideoStream, container.add_stream(codec, rate=shape.fps, options=options))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for clip in clips:
            first = pts
            for image in clip:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts = pts
                pts += 1
                container.mux(stream.encode(frame))
            spans.append((first / shape.fps, pts / shape.fps))
        container.mux(stream.encode(None))
    return spans


def _vector_type(dim: int) -> pa.DataType:
    return pa.list_(pa.float32(), dim)


def _write_data(
    root: Path, shape: DatasetShape, episodes: list[ExportEpisode], tasks: list[str]
) -> None:
    columns: dict[str, list[Any]] = {k: [] for k in ("ts", "frame", "episode", "index", "task")}
    states, actions = [], []
    index = 0
    for number, episode in enumerate(episodes):
        n = episode.length
        states.append(episode.state)
        actions.append(episode.action)
        columns["ts"].append(np.arange(n, dtype=np.float32) / np.float32(shape.fps))
        columns["frame"].append(np.arange(n, dtype=np.int64))
        columns["episode"].append(np.full(n, number, dtype=np.int64))
        columns["index"].append(np.arange(index, index + n, dtype=np.int64))
        columns["task"].append(np.full(n, tasks.index(episode.task), dtype=np.int64))
        index += n
    state = np.concatenate(states).astype(np.float32)
    action = np.concatenate(actions).astype(np.float32)
    table = pa.table(
        {
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(state.reshape(-1)), len(shape.state_names)
            ),
            "action": pa.FixedSizeListArray.from_arrays(
                pa.array(action.reshape(-1)), len(shape.action_names)
            ),
            "timestamp": pa.array(np.concatenate(columns["ts"])),
            "frame_index": pa.array(np.concatenate(columns["frame"])),
            "episode_index": pa.array(np.concatenate(columns["episode"])),
            "index": pa.array(np.concatenate(columns["index"])),
            "task_index": pa.array(np.concatenate(columns["task"])),
        }
    )
    (root / DATA_FILE).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / DATA_FILE)


def _write_episodes(
    root: Path,
    shape: DatasetShape,
    episodes: list[ExportEpisode],
    spans: dict[str, list[tuple[float, float]]],
) -> None:
    lengths = [e.length for e in episodes]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    n = len(episodes)
    columns: dict[str, Any] = {
        "episode_index": pa.array(np.arange(n, dtype=np.int64)),
        "tasks": pa.array([[e.task] for e in episodes], pa.list_(pa.string())),
        "length": pa.array(np.asarray(lengths, dtype=np.int64)),
        "data/chunk_index": pa.array(np.zeros(n, dtype=np.int64)),
        "data/file_index": pa.array(np.zeros(n, dtype=np.int64)),
        "dataset_from_index": pa.array(starts),
        "dataset_to_index": pa.array(starts + np.asarray(lengths, dtype=np.int64)),
    }
    for key in shape.cameras:
        columns[f"videos/{key}/chunk_index"] = pa.array(np.zeros(n, dtype=np.int64))
        columns[f"videos/{key}/file_index"] = pa.array(np.zeros(n, dtype=np.int64))
        columns[f"videos/{key}/from_timestamp"] = pa.array([s[0] for s in spans[key]], pa.float64())
        columns[f"videos/{key}/to_timestamp"] = pa.array([s[1] for s in spans[key]], pa.float64())
    columns["meta/episodes/chunk_index"] = pa.array(np.zeros(n, dtype=np.int64))
    columns["meta/episodes/file_index"] = pa.array(np.zeros(n, dtype=np.int64))
    (root / EPISODES_FILE).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), root / EPISODES_FILE)


def _write_tasks(root: Path, tasks: list[str]) -> None:
    # pandas metadata makes the task string the frame's index, as lerobot's load_tasks wants.
    pandas = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
    }
    table = pa.table(
        {"task_index": pa.array(range(len(tasks)), pa.int64()), "__index_level_0__": tasks}
    ).replace_schema_metadata({"pandas": json.dumps(pandas)})
    pq.write_table(table, root / "meta" / "tasks.parquet")


def _info(shape: DatasetShape, episodes: list[ExportEpisode], tasks: int) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for key, (height, width) in shape.cameras.items():
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": shape.codec,
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": shape.fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    for key, names in (("observation.state", shape.state_names), ("action", shape.action_names)):
        features[key] = {"dtype": "float32", "shape": [len(names)], "names": list(names)}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": shape.robot_type,
        "total_episodes": len(episodes),
        "total_frames": sum(e.length for e in episodes),
        "total_tasks": tasks,
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": shape.fps,
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": features,
    }
