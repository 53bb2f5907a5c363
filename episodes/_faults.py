"""Faults injected into synthetic episodes, so that quality checks have something to find."""

from __future__ import annotations

import numpy as np

from .episode import JOINT_POSITIONS, CameraStream, VectorStream

CAMERA_BLACKOUT = "camera_blackout"
FROZEN_FRAMES = "frozen_frames"
DROPPED_FRAMES = "dropped_frames"
CHOPPY_JOINTS = "choppy_joints"
#: Fault kinds the synthetic fleet injects, named like the quality flags that find them.
FAULT_KINDS = (CAMERA_BLACKOUT, CHOPPY_JOINTS, DROPPED_FRAMES, FROZEN_FRAMES)


def draw(rng: np.random.Generator, rate: float) -> tuple[str, ...]:
    """Draw at most one fault: blackouts and choppy joints twice as often as the others."""
    if float(rng.uniform()) >= rate:
        return ()
    weights = np.array([2.0, 2.0, 1.0, 1.0])
    return (FAULT_KINDS[int(rng.choice(len(FAULT_KINDS), p=weights / weights.sum()))],)


def inject(
    rng: np.random.Generator,
    faults: tuple[str, ...],
    cameras: list[CameraStream],
    vectors: list[VectorStream],
) -> None:
    """Apply ``faults`` in place (cameras and joint positions)."""
    for fault in faults:
        if fault == CHOPPY_JOINTS:
            _choppy(rng, next(v for v in vectors if v.kind == JOINT_POSITIONS))
            continue
        cam = cameras[int(rng.integers(len(cameras)))]
        span = _span(rng, len(cam.frames), cam.fps)
        if fault == CAMERA_BLACKOUT:
            cam.frames[span] = 0
        elif fault == FROZEN_FRAMES:
            cam.frames[span] = cam.frames[span.start - 1]
        elif fault == DROPPED_FRAMES:
            keep = np.ones(len(cam.frames), dtype=bool)
            keep[span] = False
            cam.frames, cam.timestamps_ns = cam.frames[keep], cam.timestamps_ns[keep]
        else:
            raise ValueError(f"unknown fault {fault!r}")


def _span(rng: np.random.Generator, count: int, fps: float) -> slice:
    """A run of 1 to 2 seconds of frames inside the episode, not at its very start."""
    # Clamped so short episodes (a few seconds) still get a span inside them; for the usual
    # lengths the draws and the result are the same as without the clamps.
    length = max(1, min(int(fps * rng.uniform(1.0, 2.0)), count // 2))
    low = min(max(2, count // 4), max(1, count - length - 1))
    start = int(rng.integers(low, max(low + 1, count - length - 1)))
    return slice(start, min(count, start + length))


def _choppy(rng: np.random.Generator, stream: VectorStream) -> None:
    """A gap of ~0.3 s, three jumps, and one pair of samples out of time order."""
    count = len(stream.timestamps_ns)
    gap = int(stream.rate_hz * 0.3)
    at = int(rng.integers(count // 4, count // 2))
    keep = np.ones(count, dtype=bool)
    keep[at : at + gap] = False
    times, values = stream.timestamps_ns[keep].copy(), stream.values[keep].copy()
    for row in rng.integers(count // 2, len(times) - 2, size=3):
        values[row, int(rng.integers(values.shape[1]))] += 0.8
    swap = int(rng.integers(len(times) // 2, len(times) - 2))
    times[swap], times[swap + 1] = times[swap + 1], times[swap]
    stream.timestamps_ns, stream.values = times, values
