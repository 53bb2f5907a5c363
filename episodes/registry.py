"""Register episodes in the operational database (sql/postgres/0001_init.sql).

The connection is passed in (psycopg 3, autocommit or idle); this module never reads
configuration. Every call runs in its own ``conn.transaction()``; one episode is registered in
one transaction: its robot and task (upserted), the episode row, its quality flags, its
per-dimension statistics, its container as version 1 (``episode_containers``) and its source
when given. Registering the same episode id twice is a no-op; :mod:`episodes.versions`
registers the versions that later processings write.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .episode import Stamps
from .errors import EpisodeError
from .info import ContainerInfo
from .quality import QualityReport
from .stats import DimStats


class RegistryError(EpisodeError):
    """The database refused an episode (e.g. its URI belongs to another episode)."""


@dataclass(frozen=True)
class EpisodeRecord:
    """Everything an ``episodes`` row holds, plus the robot and task it refers to.

    Times: ``start_ns``/``end_ns`` are integer nanoseconds of log time; ``started_at`` and
    ``ended_at`` are wall-clock (UTC).
    """

    episode_id: str
    robot_id: str
    robot_model: str
    site: str
    task_id: str
    task_description: str
    operator: str
    started_at: dt.datetime
    ended_at: dt.datetime
    start_ns: int
    end_ns: int
    steps: int
    control_hz: float
    success: bool
    uri: str
    size_bytes: int
    sha256: str
    topics: list[dict[str, Any]]
    stamps: Stamps
    instruction: str | None = None


def record_from_info(info: ContainerInfo, uri: str, size_bytes: int, sha256: str) -> EpisodeRecord:
    """The row of a container, from its metadata record and where it is stored."""
    ep = info.episode
    return EpisodeRecord(
        episode_id=str(ep["episode_id"]),
        robot_id=str(ep["robot_id"]),
        robot_model=str(ep["robot_model"]),
        site=str(ep["site"]),
        task_id=str(ep["task_id"]),
        task_description=str(ep.get("task_description", "")),
        operator=str(ep["operator"]),
        started_at=dt.datetime.fromtimestamp(info.start_ns / 1e9, tz=dt.UTC),
        ended_at=dt.datetime.fromtimestamp(info.end_ns / 1e9, tz=dt.UTC),
        start_ns=info.start_ns,
        end_ns=info.end_ns,
        steps=int(ep["steps"]),
        control_hz=info.control_hz,
        success=bool(ep["success"]),
        uri=uri,
        size_bytes=size_bytes,
        sha256=sha256,
        topics=[
            {"topic": t.topic, "group": t.group, "rate_hz": t.rate_hz, "kind": t.kind}
            for t in info.topics.values()
        ],
        stamps=info.stamps,
        instruction=str(ep["instruction"]) if ep.get("instruction") else None,
    )


_ROBOT = "INSERT INTO robots (id, model, site) VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING"
_TASK = "INSERT INTO tasks (id, description) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING"
_EPISODE = """
INSERT INTO episodes (
    id, robot_id, task_id, site, operator, started_at, ended_at, start_ns, end_ns, steps,
    control_hz, success, uri, size_bytes, sha256, topics, schema_version, pipeline_version,
    robot_sw_version, qc_report, instruction
) VALUES (
    %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s
) ON CONFLICT (id) DO NOTHING RETURNING id
"""


@dataclass(frozen=True)
class SourceRecord:
    """Where an episode's source lies: ``kind`` ``mcap`` (a file in the landing area, read with
    ``options["mapping"]``) or ``synth`` (``options`` hold the seed, index and fleet)."""

    episode_id: str
    kind: str
    uri: str
    size_bytes: int
    sha256: str
    options: dict[str, Any] = field(default_factory=dict)


_SOURCE = """
INSERT INTO episode_sources (episode_id, kind, uri, size_bytes, sha256, options)
VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (episode_id) DO NOTHING
"""
_VERSION = """
INSERT INTO episode_containers (
    episode_id, version, uri, size_bytes, sha256, schema_version, pipeline_version
) VALUES (%s, %s, %s, %s, %s, %s, %s)
"""


def insert_source(cur: psycopg.Cursor[Any], source: SourceRecord) -> None:
    """Record ``source`` (a no-op when the episode has one already)."""
    cur.execute(
        _SOURCE,
        (
            source.episode_id,
            source.kind,
            source.uri,
            source.size_bytes,
            source.sha256,
            Jsonb(source.options),
        ),
    )


def insert_version(cur: psycopg.Cursor[Any], record: EpisodeRecord, version: int) -> None:
    """Record ``record``'s container as version ``version`` of its episode."""
    cur.execute(
        _VERSION,
        (
            record.episode_id,
            version,
            record.uri,
            record.size_bytes,
            record.sha256,
            record.stamps.schema_version,
            record.stamps.pipeline_version,
        ),
    )


_FLAG = "INSERT INTO episode_quality_flags (episode_id, flag, detail) VALUES (%s, %s, %s)"
_STAT = """
INSERT INTO episode_stats (episode_id, field, dim, count, sum, sum_sq, min, max)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
"""


def register_episode(
    conn: psycopg.Connection[Any],
    record: EpisodeRecord,
    quality: QualityReport,
    stats: list[DimStats],
    source: SourceRecord | None = None,
) -> bool:
    """Insert the episode with its flags, statistics, container version 1 and ``source`` in
    one transaction.

    Returns ``True`` when the row was created, ``False`` when the id was already registered
    (nothing is changed then).
    """
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(_ROBOT, (record.robot_id, record.robot_model, record.site))
            cur.execute(_TASK, (record.task_id, record.task_description))
            cur.execute(_EPISODE, episode_params(record, quality))
            if cur.fetchone() is None:
                return False
            insert_flags_and_stats(cur, record.episode_id, quality, stats)
            insert_version(cur, record, 1)
            if source is not None:
                insert_source(cur, source)
    except psycopg.errors.UniqueViolation as exc:
        raise RegistryError(
            f"episode clashes with a registered one: {exc}", file=record.uri
        ) from exc
    except psycopg.OperationalError as exc:
        raise RegistryError(
            f"database unavailable: {exc}", file=record.uri, retryable=True
        ) from exc
    return True


def insert_flags_and_stats(
    cur: psycopg.Cursor[Any], episode_id: str, quality: QualityReport, stats: list[DimStats]
) -> None:
    """The quality flag and statistics rows of an episode."""
    cur.executemany(_FLAG, [(episode_id, f.flag, Jsonb(f.detail)) for f in quality.flags])
    cur.executemany(
        _STAT,
        [(episode_id, s.field, s.dim, s.count, s.sum, s.sum_sq, s.min, s.max) for s in stats],
    )


def episode_params(record: EpisodeRecord, quality: QualityReport) -> tuple[Any, ...]:
    return (
        record.episode_id,
        record.robot_id,
        record.task_id,
        record.site,
        record.operator,
        record.started_at,
        record.ended_at,
        record.start_ns,
        record.end_ns,
        record.steps,
        record.control_hz,
        record.success,
        record.uri,
        record.size_bytes,
        record.sha256,
        Jsonb(record.topics),
        record.stamps.schema_version,
        record.stamps.pipeline_version,
        record.stamps.robot_sw_version,
        Jsonb(quality.report),
        record.instruction,
    )


def registered_ids(conn: psycopg.Connection[Any], episode_ids: list[str]) -> set[str]:
    """Which of ``episode_ids`` already have a row."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT id::text FROM episodes WHERE id = ANY(%s::uuid[])", (episode_ids,))
        return {str(row[0]) for row in cur.fetchall()}
