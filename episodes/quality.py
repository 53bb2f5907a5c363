"""Quality checks computed from an episode's data: flags plus a short QC report.

Flags (one ``episode_quality_flags`` row each when raised):

* ``camera_blackout``: a run of black frames (mean < 12 and standard deviation < 6 levels,
  from the decoded frames) lasting at least 0.25 s.
* ``frozen_frames``: a run of decoded, non-black frames each within 0.5 levels (mean
  absolute difference) of the one before, lasting at least 0.5 s.
* ``dropped_frames``: a capture-time gap longer than 2.5 frame periods, or more than 5% of
  the frames the rate and duration promise missing.
* ``choppy_joints``: on joint positions or velocities, time that goes backwards, gaps longer
  than 3 sample periods, or (positions) one-sample jumps larger than
  ``max(0.1, 20 x median step)`` radians.
* ``decode_failure``: camera frames that do not decode.

Two more flags record how a foreign recording was ingested (:mod:`episodes.foreign`), not
what its data looks like:

* ``actions_derived``: the recording has no actions topic; its actions are the next control
  step's joint positions (the rule in :mod:`episodes._streams`).
* ``truncated``: the recording was cut off and ``--salvage`` ingested the whole records before
  the cut; the detail and the report's ``salvage`` entry give the byte offset of the damage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .episode import JOINT_POSITIONS, JOINT_VELOCITIES
from .info import TopicInfo
from .reader import EpisodeReader

CAMERA_BLACKOUT = "camera_blackout"
FROZEN_FRAMES = "frozen_frames"
DROPPED_FRAMES = "dropped_frames"
CHOPPY_JOINTS = "choppy_joints"
DECODE_FAILURE = "decode_failure"
ACTIONS_DERIVED = "actions_derived"
TRUNCATED = "truncated"
QC_VERSION = 1

BLACK_MEAN, BLACK_STD, BLACK_MIN_S = 12.0, 6.0, 0.25
FROZEN_DIFF, FROZEN_MIN_S = 0.5, 0.5
GAP_PERIODS, MISSING_FRACTION = 2.5, 0.05
JOINT_GAP_PERIODS, JUMP_MIN_RAD, JUMP_MEDIANS = 3.0, 0.1, 20.0


@dataclass(frozen=True)
class QualityFlag:
    """A raised flag and what raised it (JSON-ready detail)."""

    flag: str
    detail: dict[str, Any]


@dataclass
class QualityReport:
    """Flags raised and the per-topic figures behind them (stored as ``qc_report``)."""

    flags: list[QualityFlag] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def flag_names(self) -> list[str]:
        """Names of the raised flags."""
        return [f.flag for f in self.flags]

    def raise_flag(self, flag: str, detail: dict[str, Any]) -> None:
        """Raise ``flag``; a second raise of the same flag merges its detail under ``topics``."""
        for existing in self.flags:
            if existing.flag == flag:
                existing.detail.setdefault("topics", []).append(detail)
                return
        self.flags.append(QualityFlag(flag, {"topics": [detail]}))


def check_episode(reader: EpisodeReader) -> QualityReport:
    """Run every check on the container behind ``reader``."""
    qc = QualityReport(report={"version": QC_VERSION, "cameras": {}, "joints": {}})
    duration_s = (reader.info.end_ns - reader.info.start_ns) / 1e9
    for cam in reader.info.cameras:
        qc.report["cameras"][cam.topic] = _check_camera(reader, cam, duration_s, qc)
    for kind in (JOINT_POSITIONS, JOINT_VELOCITIES):
        topic = reader.info.vector(kind)
        if topic is not None:
            times, values = reader.read_vectors(topic.topic)
            figures = joint_figures(times, values, topic.rate_hz, jumps=kind == JOINT_POSITIONS)
            qc.report["joints"][topic.topic] = figures
            if figures["non_monotonic"] or figures["gaps"] or figures["jumps"]:
                qc.raise_flag(CHOPPY_JOINTS, {"topic": topic.topic, **figures})
    qc.report["flags"] = qc.flag_names
    return qc


def _check_camera(
    reader: EpisodeReader, cam: TopicInfo, duration_s: float, qc: QualityReport
) -> dict[str, Any]:
    times, black, frozen, failed = [], [], [], 0
    previous: npt.NDArray[np.float32] | None = None
    for header, frame in reader.iter_frames(cam.topic):
        times.append(header.time_ns)
        if frame is None:
            failed += 1
            black.append(False)
            frozen.append(False)
            previous = None
            continue
        pixels = frame.astype(np.float32)
        is_black = float(pixels.mean()) < BLACK_MEAN and float(pixels.std()) < BLACK_STD
        diff = np.inf if previous is None else float(np.abs(pixels - previous).mean())
        black.append(is_black)
        frozen.append(diff < FROZEN_DIFF and not is_black)
        previous = pixels
    stamps = np.asarray(times, dtype=np.int64)
    figures = camera_figures(stamps, np.asarray(black), np.asarray(frozen), cam.rate_hz, duration_s)
    figures["decode_failures"] = failed
    _camera_flags(qc, cam.topic, figures)
    return figures


def camera_figures(
    times: npt.NDArray[np.int64],
    black: npt.NDArray[np.bool_],
    frozen: npt.NDArray[np.bool_],
    fps: float,
    duration_s: float,
) -> dict[str, Any]:
    """Counts behind the camera flags (times in integer nanoseconds)."""
    period_ns = 1e9 / fps
    gaps = np.diff(np.sort(times)).astype(np.float64)
    expected = int(duration_s * fps)
    return {
        "frames": len(times),
        "expected_frames": expected,
        "black_frames": int(black.sum()),
        "longest_black_s": longest_run(black) / fps,
        "frozen_frames": int(frozen.sum()),
        "longest_frozen_s": (longest_run(frozen) + 1) / fps if frozen.any() else 0.0,
        "max_gap_ms": float(gaps.max()) / 1e6 if len(gaps) else 0.0,
        "long_gaps": int((gaps > GAP_PERIODS * period_ns).sum()),
        "missing_fraction": max(0.0, 1 - len(times) / expected) if expected else 0.0,
    }


def _camera_flags(qc: QualityReport, topic: str, figures: dict[str, Any]) -> None:
    if figures["longest_black_s"] >= BLACK_MIN_S:
        qc.raise_flag(CAMERA_BLACKOUT, {"topic": topic, "seconds": figures["longest_black_s"]})
    if figures["longest_frozen_s"] >= FROZEN_MIN_S:
        qc.raise_flag(FROZEN_FRAMES, {"topic": topic, "seconds": figures["longest_frozen_s"]})
    if figures["long_gaps"] or figures["missing_fraction"] > MISSING_FRACTION:
        detail = {k: figures[k] for k in ("max_gap_ms", "long_gaps", "missing_fraction")}
        qc.raise_flag(DROPPED_FRAMES, {"topic": topic, **detail})
    if figures["decode_failures"]:
        qc.raise_flag(DECODE_FAILURE, {"topic": topic, "frames": figures["decode_failures"]})


def joint_figures(
    times: npt.NDArray[np.int64], values: npt.NDArray[np.float32], rate_hz: float, jumps: bool
) -> dict[str, Any]:
    """Counts behind ``choppy_joints`` for one topic, in recorded order (times in ns)."""
    steps = np.diff(times)
    period_ns = 1e9 / rate_hz
    jump_count = 0
    if jumps and len(values) > 2:
        delta = np.abs(np.diff(values.astype(np.float64), axis=0))
        limit = np.maximum(JUMP_MIN_RAD, JUMP_MEDIANS * np.median(delta, axis=0))
        jump_count = int((delta > limit).any(axis=1).sum())
    return {
        "samples": len(times),
        "non_monotonic": int((steps <= 0).sum()),
        "gaps": int((steps > JOINT_GAP_PERIODS * period_ns).sum()),
        "max_gap_ms": float(steps.max()) / 1e6 if len(steps) else 0.0,
        "jumps": jump_count,
    }


def longest_run(mask: npt.NDArray[np.bool_]) -> int:
    """Length of the longest run of ``True`` in ``mask``."""
    best = run = 0
    for value in mask.tolist():
        run = run + 1 if value else 0
        best = max(best, run)
    return best
