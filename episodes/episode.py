"""In-memory episode records: what a writer takes and what synthesis and foreign ingest build."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .errors import InputError

CAMERA = "camera"
JOINT_POSITIONS = "joint_positions"
JOINT_VELOCITIES = "joint_velocities"
GRIPPER = "gripper"
ACTIONS = "actions"
#: Order of the state kinds concatenated into a sample's state vector (and its statistics).
STATE_KINDS = (JOINT_POSITIONS, JOINT_VELOCITIES, GRIPPER)
VECTOR_KINDS = (*STATE_KINDS, ACTIONS)

#: Version of the container layout and message encodings this package writes.
SCHEMA_VERSION = 1
#: Version of the ingest pipeline (synthesis, QC, statistics) stamped on each episode.
PIPELINE_VERSION = 1


@dataclass(frozen=True)
class Stamps:
    """Versions stamped on every episode row and container."""

    schema_version: int = SCHEMA_VERSION
    pipeline_version: int = PIPELINE_VERSION
    robot_sw_version: str = "unknown"


@dataclass
class CameraStream:
    """One camera: RGB frames and their capture times.

    :param topic: MCAP topic, e.g. ``/cam/front``.
    :param fps: nominal frame rate in Hz.
    :param timestamps_ns: int64 (N,) capture times, integer nanoseconds, increasing.
    :param frames: uint8 (N, H, W, 3) RGB frames.
    """

    topic: str
    fps: float
    timestamps_ns: npt.NDArray[np.int64]
    frames: npt.NDArray[np.uint8]

    @property
    def height(self) -> int:
        """Frame height in pixels."""
        return int(self.frames.shape[1])

    @property
    def width(self) -> int:
        """Frame width in pixels."""
        return int(self.frames.shape[2])


@dataclass
class VectorStream:
    """A float vector topic (joint positions, velocities, gripper or actions).

    :param topic: MCAP topic, e.g. ``/state/joint_positions``.
    :param kind: one of :data:`VECTOR_KINDS`.
    :param rate_hz: nominal rate in Hz.
    :param names: one name per dimension.
    :param timestamps_ns: int64 (N,) sample times, integer nanoseconds.
    :param values: float32 (N, D) values, D = ``len(names)``.
    """

    topic: str
    kind: str
    rate_hz: float
    names: tuple[str, ...]
    timestamps_ns: npt.NDArray[np.int64]
    values: npt.NDArray[np.float32]


@dataclass
class EpisodeData:
    """A whole episode in memory, with its descriptive metadata.

    ``start_ns``/``end_ns`` bound the log time (integer nanoseconds since the Unix epoch),
    ``end_ns`` exclusive; every message lies inside. ``steps`` counts control-rate steps.
    ``instruction`` is the episode's language instruction (a LeRobot task string), ``""`` for
    none.
    """

    episode_id: str
    robot_id: str
    robot_model: str
    task_id: str
    task_description: str
    site: str
    operator: str
    start_ns: int
    end_ns: int
    control_hz: float
    success: bool
    cameras: list[CameraStream]
    vectors: list[VectorStream]
    stamps: Stamps = field(default_factory=Stamps)
    extra: dict[str, str] = field(default_factory=dict)
    instruction: str = ""

    @property
    def started_at(self) -> dt.datetime:
        """Wall-clock start (UTC), from ``start_ns``."""
        return dt.datetime.fromtimestamp(self.start_ns / 1e9, tz=dt.UTC)

    @property
    def ended_at(self) -> dt.datetime:
        """Wall-clock end (UTC), from ``end_ns``."""
        return dt.datetime.fromtimestamp(self.end_ns / 1e9, tz=dt.UTC)

    @property
    def steps(self) -> int:
        """Steps at the control rate covered by ``[start_ns, end_ns)``."""
        return int((self.end_ns - self.start_ns) * self.control_hz // 1_000_000_000)

    def vector(self, kind: str) -> VectorStream:
        """The vector stream of a kind; :class:`InputError` when absent."""
        for stream in self.vectors:
            if stream.kind == kind:
                return stream
        raise InputError(f"episode has no {kind} stream", file=self.episode_id)

    def validate(self) -> None:
        """Check shapes, dtypes and time ranges; raise :class:`InputError` on the first fault."""
        if self.end_ns <= self.start_ns:
            raise InputError("end_ns must be after start_ns", file=self.episode_id)
        for cam in self.cameras:
            _check_times(self, cam.topic, cam.timestamps_ns, len(cam.frames))
            if cam.frames.dtype != np.uint8 or cam.frames.ndim != 4 or cam.frames.shape[3] != 3:
                raise InputError("frames must be uint8 (N, H, W, 3)", topic=cam.topic)
        for vec in self.vectors:
            _check_times(self, vec.topic, vec.timestamps_ns, len(vec.values))
            if vec.values.ndim != 2 or vec.values.shape[1] != len(vec.names):
                raise InputError("values must be (N, len(names))", topic=vec.topic)
            if vec.kind not in VECTOR_KINDS:
                raise InputError(f"unknown vector kind {vec.kind!r}", topic=vec.topic)
        kinds = [vec.kind for vec in self.vectors]
        if len(set(kinds)) != len(kinds):
            raise InputError("each vector kind may appear once", file=self.episode_id)


def _check_times(
    episode: EpisodeData, topic: str, times: npt.NDArray[np.int64], count: int
) -> None:
    if times.ndim != 1 or len(times) != count:
        raise InputError("one timestamp per message is required", topic=topic)
    if count and (times[0] < episode.start_ns or times[-1] >= episode.end_ns):
        raise InputError("messages must lie in [start_ns, end_ns)", topic=topic)
