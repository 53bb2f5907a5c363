"""A LeRobot v3.0 dataset opened for reading: its metadata, features and episodes.

Layout (lerobot's ``LeRobotDatasetMetadata``): ``meta/info.json`` (``codebase_version``,
``fps``, ``robot_type``, ``features``, ``data_path`` and ``video_path`` templates),
``meta/episodes/chunk-*/file-*.parquet`` (one row per episode: ``length``, ``tasks``,
``data/chunk_index``, ``data/file_index``, ``videos/<key>/{chunk_index,file_index,
from_timestamp,to_timestamp}`` and per-episode ``stats/<key>/{min,max,mean,...}``),
``meta/tasks.parquet``, ``meta/stats.json``, ``data/chunk-*/file-*.parquet`` (several episodes
per file) and ``videos/<key>/chunk-*/file-*.mp4`` (several episodes per file, one after the
other, located by the episodes' timestamps). The folder is local or any fsspec URL
(``s3://bucket/prefix``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from episodes.episode import ACTIONS, GRIPPER, JOINT_POSITIONS, JOINT_VELOCITIES
from episodes.errors import InputError, SourceError

#: The only format version read.
CODEBASE_VERSION = "v3.0"
#: Columns lerobot adds to every dataset; they index frames and carry no robot data.
INDEX_FEATURES = frozenset({"timestamp", "frame_index", "episode_index", "index", "task_index"})
#: What a numeric feature may become; ``ignore`` leaves it out.
IGNORE = "ignore"
ROLES = (JOINT_POSITIONS, JOINT_VELOCITIES, GRIPPER, ACTIONS, IGNORE)
DEFAULT_ROLES = {"observation.state": JOINT_POSITIONS, "action": ACTIONS}
_NUMERIC = frozenset({"float32", "float64", "float16", "int64", "int32", "int16", "int8", "bool"})
#: Largest metadata file read (info.json), bytes.
MAX_INFO_BYTES = 16 << 20


@dataclass(frozen=True)
class Feature:
    """A vector feature and its Quarry role (a vector kind)."""

    key: str
    role: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class EpisodeMeta:
    """One row of ``meta/episodes``: where an episode's rows and video spans are."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_file: str
    videos: dict[str, tuple[str, float, float]]  # key -> (file, from_s, to_s)
    stats: dict[str, dict[str, list[float]]]  # feature -> min/max/mean -> values
    success: bool | None


class LeRobotSource:
    """A LeRobot dataset at ``url`` (a folder or an fsspec URL); reads its metadata at once.

    :raises InputError: no ``meta/info.json``, an unknown ``codebase_version``, or a feature
        Quarry cannot map (naming the feature; ``roles`` maps a key to one of :data:`ROLES`).
    """

    def __init__(self, url: str, roles: dict[str, str] | None = None, **storage: Any) -> None:
        self.url = url.rstrip("/")
        self._table: tuple[str, pa.Table] | None = None
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **storage)
        self.info = self._info()
        self.version = str(self.info.get("codebase_version"))
        if self.version != CODEBASE_VERSION:
            raise InputError(
                f"unknown LeRobot codebase_version {self.version!r}: Quarry reads "
                f"{CODEBASE_VERSION} (convert older datasets with lerobot's converter)",
                file=self.path("meta/info.json"),
            )
        self.fps = float(self.info["fps"])
        self.robot_type = str(self.info.get("robot_type") or "lerobot")
        self.cameras, self.vectors = _features(
            self.info["features"], self.path("meta/info.json"), {**DEFAULT_ROLES, **(roles or {})}
        )
        self.episodes = self._episodes()

    def path(self, relative: str) -> str:
        """The full path of a file of the dataset (for reading and for error messages)."""
        return f"{self.root}/{relative}"

    def display(self, relative: str) -> str:
        """A file of the dataset as the user named the dataset (``s3://...`` kept)."""
        return f"{self.url}/{relative}"

    def open(self, relative: str) -> BinaryIO:
        """A seekable reader over a file of the dataset (video files are read by range)."""
        try:
            return cast(BinaryIO, self.fs.open(self.path(relative), "rb"))
        except FileNotFoundError:
            raise InputError("file missing from the dataset", file=self.display(relative)) from None
        except OSError as error:
            raise SourceError(f"cannot read: {error}", file=self.display(relative)) from error

    def read_bytes(self, relative: str) -> bytes:
        with self.open(relative) as stream:
            try:
                return bytes(stream.read())
            except OSError as error:
                raise SourceError(f"cannot read: {error}", file=self.display(relative)) from error

    def read_table(self, relative: str) -> pa.Table:
        """A Parquet file of the dataset; the last data file read is kept, since consecutive
        episodes share one."""
        if self._table is not None and self._table[0] == relative:
            return self._table[1]
        data = self.read_bytes(relative)
        try:
            table = pq.read_table(pa.BufferReader(data))
        except pa.ArrowException as error:
            raise InputError(f"not a Parquet file: {error}", file=self.display(relative)) from None
        self._table = (relative, table)
        return table

    def _info(self) -> dict[str, Any]:
        data = self.read_bytes("meta/info.json")
        if len(data) > MAX_INFO_BYTES:
            raise InputError("info.json is too large", file=self.display("meta/info.json"))
        try:
            info = json.loads(data)
        except json.JSONDecodeError as error:
            raise InputError(f"not JSON: {error}", file=self.display("meta/info.json")) from None
        if not isinstance(info, dict) or "features" not in info or "fps" not in info:
            raise InputError("no features or fps", file=self.display("meta/info.json"))
        return info

    def _episodes(self) -> list[EpisodeMeta]:
        files = sorted(self.fs.glob(self.path("meta/episodes/chunk-*/file-*.parquet")))
        if not files:
            raise InputError("no episodes metadata", file=self.display("meta/episodes/"))
        out = []
        for file in files:
            relative = str(file)[len(self.root) + 1 :]
            for row in self.read_table(relative).to_pylist():
                out.append(self._episode(row))
        return sorted(out, key=lambda e: e.index)

    def _episode(self, row: dict[str, Any]) -> EpisodeMeta:
        data_file = str(self.info["data_path"]).format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        videos = {}
        for key in self.cameras:
            video = str(self.info["video_path"]).format(
                video_key=key,
                chunk_index=row[f"videos/{key}/chunk_index"],
                file_index=row[f"videos/{key}/file_index"],
            )
            span = (
                float(row[f"videos/{key}/from_timestamp"]),
                float(row[f"videos/{key}/to_timestamp"]),
            )
            videos[key] = (video, *span)
        stats = {
            feature.key: {
                name: list(row.get(f"stats/{feature.key}/{name}") or [])
                for name in ("min", "max", "mean")
            }
            for feature in self.vectors
        }
        success = row.get("success")
        return EpisodeMeta(
            index=int(row["episode_index"]),
            length=int(row["length"]),
            tasks=tuple(row.get("tasks") or ()),
            data_file=data_file,
            videos=videos,
            stats=stats,
            success=None if success is None else bool(success),
        )

    def episode_rows(self, episode: EpisodeMeta) -> pa.Table:
        """The data rows of ``episode``, in frame order."""
        table = self.read_table(episode.data_file)
        rows = table.filter(pc.equal(table["episode_index"], episode.index))
        return rows.sort_by("frame_index")


def _features(
    features: dict[str, Any], where: str, roles: dict[str, str]
) -> tuple[list[str], list[Feature]]:
    cameras: list[str] = []
    vectors: list[Feature] = []
    for key, spec in features.items():
        dtype = str(spec.get("dtype"))
        if key in INDEX_FEATURES:
            continue
        role = roles.get(key)
        if role == IGNORE:
            continue
        if dtype == "video":
            cameras.append(key)
            continue
        shape = tuple(spec.get("shape") or ())
        if dtype not in _NUMERIC or len(shape) != 1:
            raise InputError(
                f"feature {key!r} of dtype {dtype} and shape {list(shape)} cannot be mapped "
                f"(Quarry maps videos and 1-D numeric vectors; pass --feature {key}=ignore "
                "to leave it out)",
                file=where,
                topic=key,
            )
        if role is None:
            raise InputError(
                f"numeric feature {key!r} has no Quarry role: pass --feature {key}=ROLE "
                f"with ROLE one of {', '.join(ROLES)}",
                file=where,
                topic=key,
            )
        names = spec.get("names")
        if isinstance(names, dict):  # lerobot's older {"motors": [...]} form
            names = next(iter(names.values()), None)
        if not isinstance(names, list) or len(names) != shape[0]:
            names = [f"{key}_{i}" for i in range(shape[0])]
        vectors.append(Feature(key, role, tuple(str(n) for n in names)))
    kinds = [v.role for v in vectors]
    if len(set(kinds)) != len(kinds) or ACTIONS not in kinds:
        raise InputError(
            f"features map to roles {kinds}: each role at most once and one {ACTIONS!r}",
            file=where,
        )
    return sorted(cameras), vectors
