"""Container versions and source recordings (sql/postgres/0008_episode_versions.sql).

An episode keeps its id across processings; each processing registers a new container
version (its own URI, size, SHA-256 and stamps) and the ``episodes`` row moves to it, while
older versions stay listed (and their files kept) until garbage collection finds no manifest
that lists them. The source an episode came from is kept beside it, so that a reprocess starts
from the recording (or the generator's parameters), never from Quarry's own lossy container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .mapping import Mapping, TopicRole
from .quality import ACTIONS_DERIVED, DECODE_FAILURE, TRUNCATED, QualityFlag, QualityReport
from .registry import (
    EpisodeRecord,
    RegistryError,
    SourceRecord,
    episode_params,
    insert_flags_and_stats,
    insert_source,
    insert_version,
)
from .stats import DimStats
from .synth import FleetConfig, Robot

SYNTH = "synth"
MCAP = "mcap"
#: Not a source: the episode's current container, which profiles metadata and relabel read.
CONTAINER = "container"


@dataclass(frozen=True)
class ContainerVersion:
    """One container version of an episode; ``current`` while the ``episodes`` row lists it."""

    episode_id: str
    version: int
    uri: str
    size_bytes: int
    sha256: str
    pipeline_version: int
    current: bool


def fleet_from_dict(data: dict[str, Any]) -> FleetConfig:
    """The fleet of a synthetic source's options (:func:`episodes.ingest.synth_source`)."""
    robots = tuple(
        Robot(**{**r, "cameras": tuple((str(v), float(hz)) for v, hz in r["cameras"])})
        for r in data["robots"]
    )
    cameras = data.get("cameras")
    return FleetConfig(
        **{
            **data,
            "robots": robots,
            "duration_s": tuple(data["duration_s"]),
            "cameras": None if cameras is None else tuple((str(v), float(h)) for v, h in cameras),
        }
    )


def add_source(conn: psycopg.Connection[Any], source: SourceRecord) -> None:
    """Record the source of a registered episode that has none (a no-op when it has one)."""
    with conn.transaction(), conn.cursor() as cur:
        insert_source(cur, source)


def source_of(conn: psycopg.Connection[Any], episode_id: str) -> SourceRecord | None:
    """The recorded source of ``episode_id`` (``None``: registered before sources were kept)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT kind, uri, size_bytes, sha256, options FROM episode_sources"
            " WHERE episode_id = %s",
            (episode_id,),
        )
        row = cur.fetchone()
    if row is None:
        return None
    kind, uri, size, sha, options = row
    return SourceRecord(episode_id, kind, uri, int(size), sha, dict(options))


def versions_of(conn: psycopg.Connection[Any], episode_id: str) -> list[ContainerVersion]:
    """Every listed container version of ``episode_id``, oldest first."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT episode_id::text, version, uri, size_bytes, sha256, pipeline_version,"
            " superseded_at IS NULL FROM episode_containers WHERE episode_id = %s"
            " ORDER BY version",
            (episode_id,),
        )
        return [ContainerVersion(*row) for row in cur.fetchall()]


def superseded_versions(
    conn: psycopg.Connection[Any], older_than_s: float
) -> list[ContainerVersion]:
    """Versions superseded more than ``older_than_s`` seconds ago, by episode and version."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT episode_id::text, version, uri, size_bytes, sha256, pipeline_version, false"
            " FROM episode_containers WHERE superseded_at IS NOT NULL"
            " AND superseded_at < now() - make_interval(secs => %s)"
            " ORDER BY episode_id, version",
            (older_than_s,),
        )
        return [ContainerVersion(*row) for row in cur.fetchall()]


def forget_version(conn: psycopg.Connection[Any], version: ContainerVersion) -> None:
    """Delete the row of a superseded version (its file is the caller's to delete first)."""
    with conn.transaction():
        conn.execute(
            "DELETE FROM episode_containers WHERE episode_id = %s AND version = %s"
            " AND superseded_at IS NOT NULL",
            (version.episode_id, version.version),
        )


def register_version(
    conn: psycopg.Connection[Any],
    record: EpisodeRecord,
    quality: QualityReport,
    stats: list[DimStats],
    labels: list[tuple[str, str, int | None, int | None]] | None = None,
    *,
    author: str = "pipeline",
) -> bool:
    """Make ``record``'s container the current version of its (registered) episode, in one
    transaction: the ``episodes`` row, its quality flags and statistics, and, when given, the
    labels ``author`` computed (key, value, start_ns, end_ns), replacing that author's.

    Returns ``False`` (and changes nothing) when that container is the current one already:
    a redone step registers nothing twice.
    """
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "SELECT sha256, (SELECT max(version) FROM episode_containers c"
                " WHERE c.episode_id = e.id) FROM episodes e WHERE id = %s FOR UPDATE",
                (record.episode_id,),
            )
            row = cur.fetchone()
            if row is None:
                raise RegistryError("no such episode to version", file=record.episode_id)
            if row[0] == record.sha256:
                return False
            _replace(cur, record, quality, stats, int(row[1] or 0) + 1)
            if labels is not None:
                _replace_labels(cur, record.episode_id, labels, author)
    except psycopg.errors.UniqueViolation as exc:
        raise RegistryError(f"container clashes with another: {exc}", file=record.uri) from exc
    except psycopg.OperationalError as exc:
        raise RegistryError(
            f"database unavailable: {exc}", file=record.uri, retryable=True
        ) from exc
    return True


_UPDATE = """
UPDATE episodes SET
    robot_id = %s, task_id = %s, site = %s, operator = %s, started_at = %s, ended_at = %s,
    start_ns = %s, end_ns = %s, steps = %s, control_hz = %s, success = %s, uri = %s,
    size_bytes = %s, sha256 = %s, topics = %s, schema_version = %s, pipeline_version = %s,
    robot_sw_version = %s, qc_report = %s, instruction = %s, updated_at = now()
WHERE id = %s
"""


def _replace(
    cur: psycopg.Cursor[Any],
    record: EpisodeRecord,
    quality: QualityReport,
    stats: list[DimStats],
    version: int,
) -> None:
    params = episode_params(record, quality)
    cur.execute(_UPDATE, (*params[1:], params[0]))
    cur.execute(
        "UPDATE episode_containers SET superseded_at = now()"
        " WHERE episode_id = %s AND superseded_at IS NULL",
        (record.episode_id,),
    )
    insert_version(cur, record, version)
    cur.execute("DELETE FROM episode_quality_flags WHERE episode_id = %s", (record.episode_id,))
    cur.execute("DELETE FROM episode_stats WHERE episode_id = %s", (record.episode_id,))
    insert_flags_and_stats(cur, record.episode_id, quality, stats)


def _replace_labels(
    cur: psycopg.Cursor[Any],
    episode_id: str,
    labels: list[tuple[str, str, int | None, int | None]],
    author: str,
) -> None:
    cur.execute(
        "DELETE FROM episode_labels WHERE episode_id = %s AND author = %s", (episode_id, author)
    )
    cur.executemany(
        "INSERT INTO episode_labels (episode_id, key, value, start_ns, end_ns, author)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        [(episode_id, key, value, start, end, author) for key, value, start, end in labels],
    )


def mapping_of_source(data: dict[str, Any]) -> Mapping:
    """The mapping of a recording's source options (``dataclasses.asdict`` of a
    :class:`~episodes.mapping.Mapping`)."""
    topics = tuple(
        TopicRole(**{**t, "names": None if t.get("names") is None else tuple(t["names"])})
        for t in data.get("topics", ())
    )
    return Mapping(**{**data, "topics": topics})


def current_container(conn: psycopg.Connection[Any], episode_id: str) -> SourceRecord | None:
    """The episode's current container, described as the source of a profile that reads it
    (``metadata``, ``relabel``): kind ``container``; ``None`` when there is no such episode."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT uri, size_bytes, sha256 FROM episodes WHERE id = %s", (episode_id,))
        row = cur.fetchone()
    if row is None:
        return None
    uri, size, sha = row
    return SourceRecord(episode_id, CONTAINER, uri, int(size), sha)


def update_metadata(
    conn: psycopg.Connection[Any],
    episode_id: str,
    sha256: str,
    quality: QualityReport | None,
    stats: list[DimStats] | None,
) -> None:
    """Replace the QC report, flags and statistics computed again from the episode's current
    container (``sha256``), in one transaction; ``None`` leaves them as they are.

    :raises RegistryError: the container is no longer the episode's current one.
    """
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT sha256 FROM episodes WHERE id = %s FOR UPDATE", (episode_id,))
        row = cur.fetchone()
        if row is None or row[0] != sha256:
            raise RegistryError(
                "the container was replaced while its metadata was computed", file=episode_id
            )
        if quality is None or stats is None:
            return
        cur.execute(
            "UPDATE episodes SET qc_report = %s, updated_at = now() WHERE id = %s",
            (Jsonb(quality.report), episode_id),
        )
        cur.execute("DELETE FROM episode_quality_flags WHERE episode_id = %s", (episode_id,))
        cur.execute("DELETE FROM episode_stats WHERE episode_id = %s", (episode_id,))
        insert_flags_and_stats(cur, episode_id, quality, stats)


def carry_ingest_flags(
    conn: psycopg.Connection[Any], episode_id: str, quality: QualityReport
) -> None:
    """Add to ``quality`` (computed again from the container) what only the source's ingest
    could see and the episode's row keeps: frames that did not decode in the source, derived
    actions, a salvaged cut."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT qc_report FROM episodes WHERE id = %s", (episode_id,))
        row = cur.fetchone()
        cur.execute(
            "SELECT flag, detail FROM episode_quality_flags WHERE episode_id = %s"
            " AND flag = ANY(%s) ORDER BY flag",
            (episode_id, [ACTIONS_DERIVED, TRUNCATED]),
        )
        flags = cur.fetchall()
    report = dict(row[0]) if row is not None else {}
    failures = report.get("source_decode_failures") or {}
    for topic, count in sorted(failures.items()):
        quality.raise_flag(DECODE_FAILURE, {"topic": topic, "frames": count, "stage": "source"})
    if "source_decode_failures" in report:
        quality.report["source_decode_failures"] = failures
    if "salvage" in report:
        quality.report["salvage"] = report["salvage"]
    quality.flags.extend(QualityFlag(flag, dict(detail)) for flag, detail in flags)
    quality.report["flags"] = quality.flag_names
