"""The manifest registry in Postgres: what was built, by whom, when, and from which episodes
(lineage: the manifests that hold an episode, the stale episodes of a manifest)."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from curation.errors import BadRequestError, NotFoundError

_COLUMNS = (
    "id, rows, samples, size_bytes, snapshot_id, cdc_position, sql, sample_spec, "
    "author, created_at, uri"
)


def get_manifest(conn: psycopg.Connection[Any], manifest_id: str) -> dict[str, Any]:
    """The registry row of ``manifest_id``."""
    with conn.cursor(row_factory=dict_row) as cursor:
        row = cursor.execute(
            f"SELECT {_COLUMNS} FROM manifests WHERE id = %s",
            (manifest_id,),
        ).fetchone()
    if row is None:
        raise NotFoundError(f"no manifest {manifest_id!r}", manifest_id=manifest_id)
    return row


def list_manifests(
    conn: psycopg.Connection[Any], limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first, keyset-paginated by (created_at, id)."""
    after = _decode_cursor(cursor) if cursor else None
    where = "WHERE (created_at, id) < (%s, %s)" if after else ""
    params: tuple[Any, ...] = (*after, limit + 1) if after else (limit + 1,)
    query = f"SELECT {_COLUMNS} FROM manifests {where} ORDER BY created_at DESC, id DESC LIMIT %s"
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, params).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = _encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
    return rows, next_cursor


def _encode_cursor(created_at: datetime, manifest_id: str) -> str:
    raw = f"{created_at.isoformat()}|{manifest_id}".encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, manifest_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return datetime.fromisoformat(created), manifest_id
    except (ValueError, UnicodeDecodeError):
        raise BadRequestError("malformed cursor; pass next_cursor back unchanged") from None


# -- lineage -------------------------------------------------------------------------------

_REF_COLUMNS = "m.id, m.rows, m.samples, m.snapshot_id, m.author, m.created_at"


def manifests_containing(
    conn: psycopg.Connection[Any], episode_id: uuid.UUID, limit: int = 1000
) -> list[dict[str, Any]]:
    """The registered manifests that hold ``episode_id``, newest first (at most ``limit``)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            f"SELECT {_REF_COLUMNS} FROM manifest_episodes me "
            "JOIN manifests m ON m.id = me.manifest_id WHERE me.episode_id = %s "
            "ORDER BY m.created_at DESC, m.id DESC LIMIT %s",
            (episode_id, limit),
        ).fetchall()


def manifest_episodes(
    conn: psycopg.Connection[Any],
    manifest_id: str,
    *,
    pipeline_below: int | None,
    limit: int,
    after: uuid.UUID | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The episodes of a registered manifest with their stamps and status, by episode id;
    only those with ``pipeline_version < pipeline_below`` when given (the stale ones, to
    reprocess). Keyset-paginated: pass the returned cursor as ``after``."""
    get_manifest(conn, manifest_id)  # 404 for an unknown manifest
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT e.id AS episode_id, e.pipeline_version, e.schema_version, "
            "e.robot_sw_version, e.status FROM manifest_episodes me "
            "JOIN episodes e ON e.id = me.episode_id WHERE me.manifest_id = %s "
            "AND (%s::integer IS NULL OR e.pipeline_version < %s) "
            "AND (%s::uuid IS NULL OR me.episode_id > %s) "
            "ORDER BY me.episode_id LIMIT %s",
            (manifest_id, pipeline_below, pipeline_below, after, after, limit + 1),
        ).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    for row in rows:
        row["episode_id"] = str(row["episode_id"])
    return rows, rows[-1]["episode_id"] if more else None


def parse_episode_id(value: str) -> uuid.UUID:
    """An episode id from a URL; anything that is not a UUID names no episode (404)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFoundError(f"no episode {value!r}", episode_id=value) from None


def require_episode(conn: psycopg.Connection[Any], episode_id: uuid.UUID) -> dict[str, Any]:
    """The episode's log-time range and status; 404 when there is no such episode."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT id, start_ns, end_ns, status FROM episodes WHERE id = %s", (episode_id,)
        ).fetchone()
    if row is None:
        raise NotFoundError(f"no episode {episode_id}", episode_id=str(episode_id))
    return row
