"""The sample spec: how a training sample is cut from an episode, and how many a slice holds."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from .errors import SpecError

_INT_FIELDS = ("frames_per_camera", "frame_stride", "state_history", "action_horizon")


@dataclass(frozen=True)
class SampleSpec:
    """How a sample is cut around an anchor time.

    :param control_hz: the control-rate grid in Hz onto which state and actions are resampled.
    :param frames_per_camera: frames per camera, ending at the last frame at/before the anchor.
    :param frame_stride: distance between consecutive sample frames, in camera frames.
    :param state_history: state steps at the control rate, ending at the anchor.
    :param action_horizon: action steps at the control rate, starting at the anchor.
    :param anchor_stride: control steps between consecutive anchors of a slice.
    :param cameras: the camera topics every sample carries, in order; ``None`` means each
        episode's own cameras. A fleet mixes camera rigs, so a manifest fixes the set: a
        camera an episode lacks comes back as black frames marked invalid.
    """

    control_hz: float = 50.0
    frames_per_camera: int = 2
    frame_stride: int = 1
    state_history: int = 16
    action_horizon: int = 32
    anchor_stride: int = 5
    cameras: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        hz = self.control_hz
        if isinstance(hz, bool) or not isinstance(hz, int | float):
            raise SpecError(f"control_hz must be a number, got {hz!r}")
        if not math.isfinite(hz) or not 0 < hz <= 10_000:
            raise SpecError(f"control_hz must be in (0, 10000], got {hz!r}")
        for name in (*_INT_FIELDS, "anchor_stride"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SpecError(f"{name} must be an integer, got {value!r}")
            if not 1 <= value <= 1_000_000:
                raise SpecError(f"{name} must be in [1, 1000000], got {value!r}")
        object.__setattr__(self, "control_hz", float(hz))
        object.__setattr__(self, "cameras", _camera_tuple(self.cameras))

    @property
    def period_ns(self) -> int:
        """Control period, integer nanoseconds (rounded)."""
        return round(1e9 / self.control_hz)

    @property
    def anchor_step_ns(self) -> int:
        """Distance between consecutive anchors, integer nanoseconds."""
        return self.anchor_stride * self.period_ns

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON-ready dict (the form stored in manifests)."""
        data = asdict(self)
        data["cameras"] = None if self.cameras is None else list(self.cameras)
        return data

    @classmethod
    def from_dict(cls, data: object) -> SampleSpec:
        """Build a spec from its dict form; missing keys take defaults, unknown keys fail."""
        if not isinstance(data, dict):
            raise SpecError(f"sample_spec must be an object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise SpecError(f"unknown sample_spec keys: {', '.join(unknown)}")
        return cls(**data)

    @overload
    def count_samples(self, start_ns: int, end_ns: int) -> int: ...

    @overload
    def count_samples(
        self, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike
    ) -> npt.NDArray[np.int64]: ...

    def count_samples(
        self, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike
    ) -> int | npt.NDArray[np.int64]:
        """Anchors in each slice ``[start_ns, end_ns)`` (integer nanoseconds); vectorized.

        Plain ints give an int; arrays (broadcast together) give an int64 array.
        """
        step = self.anchor_step_ns
        if isinstance(start_ns, int | np.integer) and isinstance(end_ns, int | np.integer):
            span = int(end_ns) - int(start_ns)
            return max(0, -(-span // step))
        starts = np.asarray(start_ns, dtype=np.int64)
        ends = np.asarray(end_ns, dtype=np.int64)
        span = np.maximum(ends - starts, 0)
        counts: npt.NDArray[np.int64] = (span + (step - 1)) // step
        return counts

    def anchors(self, start_ns: int, end_ns: int) -> npt.NDArray[np.int64]:
        """Anchor times of the slice ``[start_ns, end_ns)``, integer nanoseconds."""
        count = self.count_samples(int(start_ns), int(end_ns))
        return int(start_ns) + np.arange(count, dtype=np.int64) * self.anchor_step_ns


def _camera_tuple(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise SpecError(f"cameras must be a list of camera topics, got {value!r}")
    if not value or not all(isinstance(v, str) and v for v in value):
        raise SpecError(f"cameras must be a non-empty list of topic names, got {value!r}")
    if len(set(value)) != len(value):
        raise SpecError(f"cameras lists a topic twice: {value!r}")
    return tuple(value)
