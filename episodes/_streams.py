"""Decode the planned topics of a foreign recording into camera and vector streams.

Times, rates and ordering follow :mod:`episodes.foreign` (its module docstring). A message
whose payload does not decode is left out and counted (cameras) or refused (vectors, where a
silent hole would pass for data); a message that lacks the mapped field, or whose image or
vector shape differs from the topic's first message, is a :class:`SchemaError` naming the
file, topic and byte offset of the record holding it.

A recording with no actions topic gets actions derived from its joint positions by one rule:
the action at a joint-position sample is the joint positions of the next control step, i.e.
of the sample nearest to ``t + 1 / control_hz`` among the later ones (``control_hz``: the
mapping's, else the joint positions' rate, so by default simply the next sample). A sample
whose next step was not recorded (none less than half a control period from ``t + 1 /
control_hz``: the last ones, and those before a gap) gets no action. The actions keep the
joint names with a ``_next`` suffix and the joint positions' rate;
:attr:`Streams.derived_from` names the source topic, and ingest raises the ``actions_derived``
QC flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _formats as fmt
from ._plan import DEFAULT_TOPICS, Planned
from ._scan import RawMessage, Recording
from .episode import (
    ACTIONS,
    CAMERA,
    JOINT_POSITIONS,
    JOINT_VELOCITIES,
    CameraStream,
    VectorStream,
)
from .errors import DecodeError, EpisodeError, InputError, SchemaError, TopicError
from .mapping import Mapping

#: Most decoded frame bytes held for one recording (the writer encodes from memory).
MAX_DECODED_BYTES = 8 * 1024**3
_NAMED_FIELDS = ("position", "velocity", "effort")


@dataclass
class Streams:
    """Decoded streams of a recording, with what was measured and left out on the way."""

    cameras: list[CameraStream] = field(default_factory=list)
    vectors: list[VectorStream] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    measured_hz: dict[str, float] = field(default_factory=dict)
    profile: str = ""
    #: the recorded topic actions were derived from, when the recording has none.
    derived_from: str | None = None


def read_streams(rec: Recording, planned: list[Planned], mapping: Mapping) -> Streams:
    """Decode every planned topic (cameras first)."""
    out = Streams(profile=rec.profile)
    budget = [MAX_DECODED_BYTES]
    for plan in planned:
        try:
            if plan.role == CAMERA:
                _add_camera(out, rec, plan, mapping, budget)
            else:
                _add_vector(out, rec, plan, mapping)
        except EpisodeError as exc:
            exc.file = exc.file or rec.name
            exc.topic = exc.topic or plan.source
            raise
    if not any(v.kind == ACTIONS for v in out.vectors):
        positions = next(v for v in out.vectors if v.kind == JOINT_POSITIONS)
        out.vectors.append(derive_actions(positions, mapping.control_hz, rec.name))
        out.vectors.sort(key=lambda v: v.topic)
        out.derived_from = next(p.source for p in planned if p.role == JOINT_POSITIONS)
    return out


def derive_actions(
    positions: VectorStream, control_hz: float | None, name: str = ""
) -> VectorStream:
    """Actions from joint positions: the next control step's positions (module docstring)."""
    order = np.argsort(positions.timestamps_ns, kind="stable")
    times, values = positions.timestamps_ns[order], positions.values[order]
    count, own = len(times), np.arange(len(times))
    period = round(1e9 / (control_hz or positions.rate_hz))
    target = times + period
    # The samples either side of t + period, both later than the sample itself.
    after = np.maximum(np.searchsorted(times, target), own + 1)
    before = np.maximum(after - 1, own + 1)
    gap_after = np.abs(times[np.minimum(after, count - 1)] - target)
    gap_before = np.abs(times[np.minimum(before, count - 1)] - target)
    pick = np.where((after < count) & (gap_after < gap_before), after, before)
    keep = pick < count
    keep[keep] = 2 * np.abs(times[pick[keep]] - target[keep]) < period
    if keep.sum() < 2:
        raise TopicError(
            "too few joint positions to derive actions from", file=name, topic=positions.topic
        )
    return VectorStream(
        DEFAULT_TOPICS[ACTIONS],
        ACTIONS,
        positions.rate_hz,
        tuple(f"{n}_next" for n in positions.names),
        times[keep],
        values[pick[keep]],
    )


def _time(message: Any, raw: RawMessage, mapping: Mapping) -> int:
    if mapping.timestamps == "header":
        stamp = fmt.stamp_ns(message)
        if stamp is not None:
            return stamp
    return raw.log_time


def _add_camera(
    out: Streams, rec: Recording, plan: Planned, mapping: Mapping, budget: list[int]
) -> None:
    times: list[int] = []
    frames: list[npt.NDArray[np.uint8]] = []
    failed = 0
    for raw in rec.messages[plan.channel_id]:
        try:
            message = plan.decoder(raw.data)
            frame = fmt.image_rgb(message, plan.compressed)
        except SchemaError as exc:
            exc.offset = raw.offset
            raise
        except Exception:  # a damaged payload: CDR, JSON or codec errors alike
            failed += 1
            continue
        if frames and frame.shape != frames[0].shape:
            raise SchemaError(
                f"frame of {frame.shape[1]}x{frame.shape[0]} after "
                f"{frames[0].shape[1]}x{frames[0].shape[0]} ones",
                offset=raw.offset,
            )
        budget[0] -= frame.nbytes
        if budget[0] < 0:
            raise InputError(f"decoded frames exceed {MAX_DECODED_BYTES} bytes", offset=raw.offset)
        times.append(_time(message, raw, mapping))
        frames.append(frame)
    if not frames:
        raise DecodeError("no frame of the camera decodes", offset=plan.offset)
    height, width = frames[0].shape[:2]
    if height % 2 or width % 2:
        raise SchemaError(f"frames of {width}x{height}: H.264 needs even sizes", offset=plan.offset)
    order = np.argsort(np.asarray(times, dtype=np.int64), kind="stable")
    stamps = np.asarray(times, dtype=np.int64)[order]
    measured = measured_rate(stamps)
    rate = _camera_rate(plan.rate_hz or measured, mapping.window_s, plan)
    out.cameras.append(CameraStream(plan.topic, rate, stamps, np.stack(frames)[order]))
    out.failures[plan.topic] = failed
    if measured is not None:
        out.measured_hz[plan.topic] = round(measured, 3)


def _camera_rate(nominal: float | None, window_s: float, plan: Planned) -> float:
    """The nominal rate rounded to a multiple of ``1 / window_s`` (whole frames per window)."""
    if nominal is None:
        raise TopicError("one frame cannot give a rate: set rate_hz", offset=plan.offset)
    rate = round(nominal * window_s) / window_s
    if rate <= 0:
        raise InputError(f"a {nominal:.3f} Hz camera is too slow for {window_s} s windows")
    return rate


def _add_vector(out: Streams, rec: Recording, plan: Planned, mapping: Mapping) -> None:
    times: list[int] = []
    rows: list[npt.NDArray[np.float32]] = []
    names = plan.names
    for raw in rec.messages[plan.channel_id]:
        try:
            message = plan.decoder(raw.data)
        except Exception as exc:  # CDR and JSON decoders raise assorted types
            raise DecodeError(f"message does not decode: {exc}", offset=raw.offset) from exc
        row = _row(message, plan, raw)
        if rows and len(row) != len(rows[0]):
            raise SchemaError(f"{len(row)} values after {len(rows[0])}", offset=raw.offset)
        if names is None:
            names = _names(message, plan, len(row))
        times.append(_time(message, raw, mapping))
        rows.append(row)
    if not rows or len(rows[0]) == 0:
        if plan.optional:
            return
        raise SchemaError(f"field {_path(plan)} is empty", offset=plan.offset)
    if names is None or len(names) != len(rows[0]):
        raise InputError(f"{len(names or ())} names for {len(rows[0])} values")
    stamps = np.asarray(times, dtype=np.int64)
    measured = measured_rate(stamps)
    rate = plan.rate_hz or (round(measured, 1) if measured else None)
    if rate is None:
        raise TopicError("one sample cannot give a rate: set rate_hz", offset=plan.offset)
    out.vectors.append(
        VectorStream(plan.topic, plan.role, rate, tuple(names), stamps, np.stack(rows))
    )
    if measured is not None:
        out.measured_hz[plan.topic] = round(measured, 3)


def _row(message: Any, plan: Planned, raw: RawMessage) -> npt.NDArray[np.float32]:
    try:
        return fmt.numbers(fmt.resolve(message, plan.steps))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise SchemaError(
            f"field {_path(plan)} of a {plan.schema or 'schemaless'} message: "
            f"{type(exc).__name__} {exc}",
            offset=raw.offset,
        ) from exc


def _names(message: Any, plan: Planned, count: int) -> tuple[str, ...]:
    """Dimension names: a JointState's ``name`` (cut like the field), else ``role_i``."""
    first = plan.steps[0]
    try:
        joints = [str(n) for n in fmt.value(message, "name")]
    except (KeyError, TypeError):
        joints = []
    if len(plan.steps) == 1 and first.name in _NAMED_FIELDS and joints:
        picked = joints[first.start : first.stop] if first.sliced else joints
        if first.start is not None and not first.sliced:
            picked = joints[first.start : first.start + 1]
        if len(picked) == count:
            suffix = "_vel" if plan.role == JOINT_VELOCITIES else ""
            return tuple(f"{n}{suffix}" for n in picked)
    return tuple(f"{plan.role}_{i}" for i in range(count))


def _path(plan: Planned) -> str:
    return ".".join(
        s.name
        + (f"[{s.start}:{s.stop}]" if s.sliced else f"[{s.start}]" if s.start is not None else "")
        for s in plan.steps
    )


def measured_rate(times: npt.NDArray[np.int64]) -> float | None:
    """``1 / median interval`` of the sorted times, Hz; ``None`` with under two samples."""
    steps = np.diff(np.sort(times))
    steps = steps[steps > 0]
    return 1e9 / float(np.median(steps)) if len(steps) else None
