"""Foreign recordings: MCAP files written by other tools, rewritten into Quarry containers.

``ingest_mcap`` is what ``quarry ingest mcap`` runs. For each file it:

1. hashes it; the episode id is UUIDv5 of the SHA-256, so a file ingested twice is skipped;
2. scans every record (any chunking; CRCs checked), refusing a truncated or corrupt file
   with a :class:`~episodes.errors.ContainerError` naming the file and byte offset; with
   ``salvage``, a file cut off at the tail gives the whole records before the cut, as
   ``mcap recover`` does (:mod:`episodes._scan`), and the ``truncated`` QC flag;
3. picks the topics (:mod:`episodes._plan`, :mod:`episodes.mapping`) and decodes them: ROS 2
   ``sensor_msgs/msg/CompressedImage``/``Image``/``JointState`` (CDR, decoded with
   mcap-ros2-support) and Foxglove's JSON ``foxglove.CompressedImage``/``RawImage``;
   any numeric field of other topics through the mapping;
4. keeps every message at its recorded time: nothing is resampled at ingest (the sample
   reader resamples onto the control grid at read time). Each message's time is its own
   stamp (``header.stamp``, Foxglove ``timestamp``) where it has a non-zero one, else its log
   time (``timestamps = "log"`` always uses log time). Camera frames are sorted by time;
   vector samples keep their recorded order, so QC still sees time going backwards;
5. records nominal rates: the mapping's ``rate_hz``, else ``1 / median interval``; camera
   rates are then rounded to a multiple of ``1 / W`` (a window must hold whole frame
   periods), vector rates to 0.1 Hz; the measured rates go into the episode's ``extra``;
6. writes the Quarry container (grouped topics, H.264 with the pinned encoder settings),
   computes QC flags and statistics from it, and registers it like a synthetic episode.
   Frames that fail to decode in the source are left out and raise ``decode_failure``.
   A recording with no actions topic gets actions derived from its joint positions (the next
   control step's, :func:`episodes._streams.derive_actions`) and the ``actions_derived`` flag.

The episode spans ``[first message, last message]`` extended to a whole number of control
periods. Stamps: the mapping's (or the CLI's), else ``SCHEMA_VERSION``, ``PIPELINE_VERSION``
and ``"unknown"``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from ._plan import DEFAULT_TOPICS, Planned, plan_topics
from ._scan import Damage, scan_file
from ._streams import Streams, read_streams
from .episode import ACTIONS, PIPELINE_VERSION, SCHEMA_VERSION, EpisodeData, Stamps
from .errors import InputError, SourceError
from .ingest import IngestResult, existing_result, register, store_episode
from .mapping import Mapping
from .quality import ACTIONS_DERIVED, DECODE_FAILURE, TRUNCATED, QualityReport
from .registry import SourceRecord, registered_ids
from .versions import add_source, source_of
from .writer import WriteOptions

_NAMESPACE = uuid.UUID("0d4b7c1e-52a9-4f0e-8c36-9b7d2f5a1e64")
#: Longest episode accepted, seconds (a longer span means mixed clocks: see ``timestamps``).
MAX_EPISODE_S = 24 * 3600.0


@dataclass
class ForeignEpisode:
    """A foreign recording read into memory: the episode and what could not be decoded.

    ``source_failures`` maps a container topic to the number of its frames left out;
    ``derived_from`` is the topic actions were derived from (none recorded), ``damage`` where
    a salvaged file was cut off, and ``salvaged`` counts what was kept of it.
    """

    episode: EpisodeData
    source_failures: dict[str, int] = field(default_factory=dict)
    derived_from: str | None = None
    damage: Damage | None = None
    salvaged: dict[str, int] = field(default_factory=dict)


def recording_id(sha256: str) -> str:
    """The episode UUID of a recording, from its SHA-256 (hex)."""
    return str(uuid.uuid5(_NAMESPACE, f"quarry-mcap/{sha256}"))


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def ingest_mcap(
    conn: psycopg.Connection[Any],
    objects_root: Path,
    paths: Sequence[Path],
    *,
    robot: str | None = None,
    task: str | None = None,
    mapping: Mapping | None = None,
    progress: Callable[[int, int], None] | None = None,
    salvage: bool = False,
) -> list[IngestResult]:
    """Ingest foreign MCAP recordings (module docstring); one result per path, in order.

    ``robot`` and ``task`` override the mapping's. The first bad file raises its
    :class:`~episodes.errors.EpisodeError`; files before it stay registered (one transaction
    per episode), so a re-run after fixing it skips them. ``progress(done, total)`` counts
    files; ``salvage`` ingests what is whole of files cut off at the tail.
    """
    base = (mapping or Mapping()).with_overrides(robot=robot, task=task)
    results = []
    for path in paths:
        results.append(ingest_recording(conn, objects_root, Path(path), base, salvage=salvage))
        if progress is not None:
            progress(len(results), len(paths))
    return results


def ingest_recording(
    conn: psycopg.Connection[Any],
    objects_root: Path,
    path: Path,
    mapping: Mapping,
    *,
    salvage: bool = False,
) -> IngestResult:
    """Ingest one recording; an already registered one is reported with ``created=False``
    (and, registered before sources were kept, gets this file as its source: it can then be
    reprocessed)."""
    _check_identity(mapping, path)
    if not path.is_file():
        raise SourceError("no such recording file", file=str(path), retryable=False)
    digest = file_sha256(path)
    episode_id = recording_id(digest)
    if registered_ids(conn, [episode_id]):
        if source_of(conn, episode_id) is None:  # registered before sources were kept
            add_source(
                conn,
                land_recording(objects_root, path, digest, episode_id, mapping, salvage=salvage),
            )
        return existing_result(conn, episode_id)
    foreign = read_recording(path, mapping, sha256=digest, salvage=salvage)
    prepared = store_episode(foreign.episode, objects_root, WriteOptions(window_s=mapping.window_s))
    add_source_failures(prepared.quality, foreign.source_failures)
    add_ingest_flags(prepared.quality, foreign)
    source = land_recording(objects_root, path, digest, episode_id, mapping, salvage=salvage)
    return register(conn, dataclasses.replace(prepared, source=source))


def landing_path(objects_root: Path, sha256: str) -> Path:
    """Where a source recording is kept: ``<objects_root>/landing/<sha256>.mcap``."""
    return objects_root.resolve() / "landing" / f"{sha256}.mcap"


def land_recording(
    objects_root: Path,
    path: Path,
    sha256: str,
    episode_id: str,
    mapping: Mapping,
    *,
    salvage: bool = False,
) -> SourceRecord:
    """Copy the recording ``path`` (of hex SHA-256 ``sha256``) into the landing area, unless
    it lies there already, and describe it as the episode's source."""
    target = landing_path(objects_root, sha256)
    if path.resolve() != target and not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
        try:
            shutil.copyfile(path, tmp)
            Path(tmp).replace(target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    options = {"mapping": dataclasses.asdict(mapping), "salvage": salvage}
    size = target.stat().st_size
    return SourceRecord(episode_id, "mcap", "file://" + str(target), size, sha256, options)


def read_recording(
    path: Path, mapping: Mapping, *, sha256: str | None = None, salvage: bool = False
) -> ForeignEpisode:
    """Scan, check and decode a recording into an :class:`EpisodeData` (not yet written)."""
    _check_identity(mapping, path)
    digest = sha256 or file_sha256(path)
    return transform_recording(decode_recording(path, mapping, salvage=salvage), digest, mapping)


@dataclass
class DecodedRecording:
    """A recording scanned and decoded (the pipeline's decode step), not yet an episode."""

    path: Path
    source_topics: dict[str, str]
    streams: Streams
    damage: Damage | None
    salvaged: dict[str, int]


def decode_recording(path: Path, mapping: Mapping, *, salvage: bool = False) -> DecodedRecording:
    """Scan every record (CRCs checked), pick the topics and decode their messages."""
    _check_identity(mapping, path)
    rec = scan_file(path, salvage=salvage)
    planned = plan_topics(rec, mapping)
    streams = read_streams(rec, planned, mapping)
    salvaged = {
        "file_size": rec.size,
        "chunks": len(rec.chunks),
        "messages": sum(len(m) for m in rec.messages.values()),
    }
    topics = _source_topics(planned, streams)
    return DecodedRecording(path, topics, streams, rec.damage, salvaged if rec.damage else {})


def transform_recording(decoded: DecodedRecording, sha256: str, mapping: Mapping) -> ForeignEpisode:
    """The episode of a decoded recording: its span on the control grid, rates and stamps."""
    streams = decoded.streams
    return ForeignEpisode(
        _episode(decoded.path, sha256, mapping, decoded.source_topics, streams),
        streams.failures,
        streams.derived_from,
        decoded.damage,
        decoded.salvaged,
    )


def add_ingest_flags(quality: QualityReport, foreign: ForeignEpisode) -> None:
    """Raise ``actions_derived`` and ``truncated`` where they apply; the report's ``salvage``
    entry gives the damage's byte offset, the file's size and what was kept."""
    if foreign.derived_from is not None:
        quality.raise_flag(
            ACTIONS_DERIVED, {"topic": foreign.derived_from, "rule": "next_joint_positions"}
        )
    if foreign.damage is not None:
        detail = {
            "offset": foreign.damage.offset,
            "reason": foreign.damage.reason,
            **foreign.salvaged,
        }
        quality.raise_flag(TRUNCATED, detail)
        quality.report["salvage"] = detail
    quality.report["flags"] = quality.flag_names


def add_source_failures(quality: QualityReport, failures: dict[str, int]) -> None:
    """Raise ``decode_failure`` for frames left out because they did not decode in the source."""
    failed = {topic: count for topic, count in failures.items() if count}
    for topic, count in sorted(failed.items()):
        quality.raise_flag(DECODE_FAILURE, {"topic": topic, "frames": count, "stage": "source"})
    quality.report["source_decode_failures"] = failed
    quality.report["flags"] = quality.flag_names


def _check_identity(mapping: Mapping, path: Path) -> None:
    for key in ("robot", "task"):
        if not getattr(mapping, key):
            raise InputError(
                f"no {key} given: pass --{key} or set {key} in the mapping", file=str(path)
            )


def _episode(
    path: Path, digest: str, mapping: Mapping, source_topics: dict[str, str], streams: Streams
) -> EpisodeData:
    times = [c.timestamps_ns for c in streams.cameras] + [v.timestamps_ns for v in streams.vectors]
    start = min(int(t.min()) for t in times)
    last = max(int(t.max()) for t in times)
    if (last - start) / 1e9 > MAX_EPISODE_S:
        raise InputError(
            f"messages span {(last - start) / 3.6e12:.1f} h: mixed clocks? "
            "set timestamps = 'log' in the mapping",
            file=str(path),
        )
    control_hz = mapping.control_hz or next(v.rate_hz for v in streams.vectors if v.kind == ACTIONS)
    period = round(1e9 / control_hz)
    end = start + ((last - start) // period + 1) * period
    assert mapping.robot is not None and mapping.task is not None  # _check_identity
    extra = {
        "source": str(path.resolve()),
        "source_sha256": digest,
        "source_profile": streams.profile,
        "source_topics": json.dumps(source_topics, sort_keys=True),
        "measured_rates_hz": json.dumps(streams.measured_hz, sort_keys=True),
    }
    return EpisodeData(
        episode_id=recording_id(digest),
        robot_id=mapping.robot,
        robot_model=mapping.robot_model or mapping.robot,
        task_id=mapping.task,
        task_description=mapping.task_description,
        site=mapping.site,
        operator=mapping.operator,
        start_ns=start,
        end_ns=end,
        control_hz=float(control_hz),
        success=mapping.success,
        cameras=streams.cameras,
        vectors=streams.vectors,
        stamps=stamps_of(mapping),
        extra=extra,
    )


def _source_topics(planned: list[Planned], streams: Streams) -> dict[str, str]:
    """Container topic -> recorded topic; derived actions read ``derived:<topic>``."""
    topics = {p.topic: p.source for p in planned}
    if streams.derived_from is not None:
        topics[DEFAULT_TOPICS[ACTIONS]] = f"derived:{streams.derived_from}"
    return topics


def stamps_of(mapping: Mapping) -> Stamps:
    """The mapping's stamps, with this package's versions and ``"unknown"`` as defaults."""
    return Stamps(
        schema_version=mapping.schema_version or SCHEMA_VERSION,
        pipeline_version=mapping.pipeline_version or PIPELINE_VERSION,
        robot_sw_version=mapping.robot_sw_version or "unknown",
    )
