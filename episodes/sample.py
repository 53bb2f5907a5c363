"""A training sample and the resampling rules that build it.

Semantics, on the control-rate grid of the :class:`~episodes.spec.SampleSpec`
(period P = 1 / control_hz):

* frames: for each camera the last frame captured at or before the anchor and the
  ``frames_per_camera - 1`` frames before it, ``frame_stride`` frames apart, oldest first
  ("previous frame"); missing ones (before the camera's first frame) are invalid and repeat
  the oldest valid frame (zeros when there is none).
* state: at ``anchor - (state_history - 1 - i) * P``, each state topic linearly
  interpolated between its samples around the grid time; ``state`` concatenates joint
  positions, joint velocities and gripper, in that order. A grid time is invalid when no
  sample precedes it, when it is more than 1.5 nominal periods past the last sample, or when
  the two samples around it are more than 3 nominal periods apart (a gap).
* actions: at ``anchor + i * P``, the last action at or before the grid time (zero-order
  hold, as commands hold until the next one). Invalid at or after the episode end, before
  the first action, or more than 1.5 action periods after the action it holds.

Invalid entries hold the nearest valid value, so a model may use them with the mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: A grid time further than this many nominal periods past its last sample is invalid.
MAX_HOLD_PERIODS = 1.5
#: Samples further apart than this many nominal periods are a gap; grid times inside are invalid.
MAX_GAP_PERIODS = 3.0


@dataclass
class Sample:
    """One training sample (times in integer nanoseconds of log time)."""

    anchor_ns: int
    frames: dict[str, npt.NDArray[np.uint8]]
    frame_ns: dict[str, npt.NDArray[np.int64]]
    frame_valid: dict[str, npt.NDArray[np.bool_]]
    state: npt.NDArray[np.float32]
    state_ns: npt.NDArray[np.int64]
    state_valid: npt.NDArray[np.bool_]
    actions: npt.NDArray[np.float32]
    action_ns: npt.NDArray[np.int64]
    action_valid: npt.NDArray[np.bool_]


def grid(anchor_ns: int, period_ns: int, before: int, after: int) -> npt.NDArray[np.int64]:
    """Grid times: ``before`` steps ending at the anchor, or ``after`` steps from it."""
    if before:
        return anchor_ns - np.arange(before - 1, -1, -1, dtype=np.int64) * period_ns
    return anchor_ns + np.arange(after, dtype=np.int64) * period_ns


def interpolate(
    times: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    at: npt.NDArray[np.int64],
    period_ns: float,
    *,
    ordered: bool = False,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Linear interpolation of ``values`` (N, D) sampled at ``times`` onto ``at``, with validity.

    ``ordered``: the rows are already in time order (ties in recorded order), as a window
    array's are, so the stable sort that puts them there is skipped.
    """
    dims, count = values.shape[1], len(times)
    if count == 0:
        return np.zeros((len(at), dims), np.float32), np.zeros(len(at), bool)
    if not ordered:
        order = np.argsort(times, kind="stable")
        times, values = times[order], values[order]
    prev = np.searchsorted(times, at, side="right") - 1
    lo = np.maximum(prev, 0)  # prev <= count - 1 and prev + 1 >= 0 always
    hi = np.minimum(prev + 1, count - 1)
    t0, t1 = times[lo], times[hi]
    span = np.maximum(t1 - t0, 1)
    ratio = np.minimum(np.maximum((at - t0) / span, 0.0), 1.0)
    weight = np.where(hi > lo, ratio, 0.0)[:, None]
    start = values[lo]
    out = start + weight * (values[hi] - start)
    known = prev >= 0
    inside = known & (hi > lo) & (t1 - t0 <= MAX_GAP_PERIODS * period_ns)
    held = known & (at - t0 <= MAX_HOLD_PERIODS * period_ns)
    return out.astype(np.float32), inside | held


def hold(
    times: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    at: npt.NDArray[np.int64],
    period_ns: float,
    *,
    ordered: bool = False,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Zero-order hold of ``values`` (N, D) onto ``at``: the last sample at or before each time.

    ``ordered`` as for :func:`interpolate`.
    """
    dims = values.shape[1]
    if len(times) == 0:
        return np.zeros((len(at), dims), np.float32), np.zeros(len(at), bool)
    if not ordered:
        order = np.argsort(times, kind="stable")
        times, values = times[order], values[order]
    prev = np.searchsorted(times, at, side="right") - 1
    idx = np.maximum(prev, 0)  # prev <= len(times) - 1 always
    valid = (prev >= 0) & (at - times[idx] <= MAX_HOLD_PERIODS * period_ns)
    return values[idx].astype(np.float32, copy=False), valid


def frame_picks(
    times: npt.NDArray[np.int64], anchor_ns: int, count: int, stride: int
) -> npt.NDArray[np.intp]:
    """Indices into ``times`` (sorted) of the sample's frames, oldest first; -1 where missing."""
    last = int(np.searchsorted(times, anchor_ns, side="right")) - 1
    picks = last - np.arange(count - 1, -1, -1, dtype=np.intp) * stride
    picks[picks < 0] = -1
    if last < 0:
        picks[:] = -1
    return picks
