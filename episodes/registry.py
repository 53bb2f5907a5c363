"""Register episodes in the operational database (sql/postgres/0001_init.sql).

The connection is passed in (psycopg 3, autocommit or idle); this module never reads
configuration. Every call runs in its own ``conn.transaction()``; one episode is registered in
one transaction: its robot and task (upserted), the episode row, its quality
flags and its per-dimension statistics. Registering the same episode id twice is a no-op.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
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
) -> bool:
    """Insert the episode with its flags and statistics in one transaction.

    Returns ``True`` when the row was created, ``False`` when the id was already registered
    (nothing is changed then).
    """
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(_ROBOT, (record.robot_id, record.robot_model, record.site))
            cur.execute(_TASK, (record.task_id, record.task_description))
            cur.execute(_EPISODE, _episode_params(record, quality))
            if cur.fetchone() is None:
                return False
            cur.executemany(
                _FLAG, [(record.episode_id, f.flag, Jsonb(f.detail)) for f in quality.flags]
            )
            cur.executemany(
                _STAT,
                [
                    (record.episode_id, s.field, s.dim, s.count, s.sum, s.sum_sq, s.min, s.max)
                    for s in stats
                ],
            )
    except psycopg.errors.UniqueViolation as exc:
        raise RegistryError(
            f"episode clashes with a registered one: {exc}", file=record.uri
        ) from exc
    except psycopg.OperationalError as exc:
        raise RegistryError(
            f"database unavailable: {exc}", file=record.uri, retryable=True
        ) from exc
    return True


def _episode_params(record: EpisodeRecord, quality: QualityReport) -> tuple[Any, ...]:
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
