"""The episode catalog in the operational database: list and describe episodes, retracted
ones included (the warehouse's ``episodes`` view leaves those out, so this is where a
retraction can be found and undone)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from curation.errors import BadRequestError
from curation.lineage import LineageStore, count_holders
from curation.registry import require_episode

_SUMMARY = (
    "id, robot_id, task_id, site, operator, started_at, start_ns, end_ns, steps, success, "
    "status, pipeline_version"
)
_DETAIL = (
    "id, robot_id, task_id, site, operator, started_at, ended_at, start_ns, end_ns, steps, "
    "control_hz, success, uri, size_bytes, sha256, topics, status, schema_version, "
    "pipeline_version, robot_sw_version, instruction, created_at, updated_at"
)


def list_episodes(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    cursor: str | None = None,
    robot_id: str | None = None,
    task_id: str | None = None,
    status: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Episodes by id, optionally of one robot, task or status; keyset-paginated: pass the
    returned cursor (the last id) back as ``cursor`` for the next page."""
    after = _cursor(cursor)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            f"SELECT {_SUMMARY} FROM episodes "
            "WHERE (%(after)s::uuid IS NULL OR id > %(after)s) "
            "AND (%(robot)s::text IS NULL OR robot_id = %(robot)s) "
            "AND (%(task)s::text IS NULL OR task_id = %(task)s) "
            "AND (%(status)s::text IS NULL OR status = %(status)s) "
            "ORDER BY id LIMIT %(limit)s",
            {
                "after": after,
                "robot": robot_id,
                "task": task_id,
                "status": status,
                "limit": limit + 1,
            },
        ).fetchall()
    more = len(rows) > limit
    rows = [_public(row) for row in rows[:limit]]
    return rows, rows[-1]["id"] if more else None


def get_episode(
    conn: psycopg.Connection[Any], store: LineageStore, episode_id: uuid.UUID
) -> dict[str, Any]:
    """Everything known about one episode: its row, its quality flags, how many labels and
    registered manifests (by the warehouse's lineage) it has, and its retraction log
    (oldest first)."""
    require_episode(conn, episode_id)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(f"SELECT {_DETAIL} FROM episodes WHERE id = %s", (episode_id,)).fetchone()
        assert row is not None  # require_episode found it
        flags = cur.execute(
            "SELECT flag FROM episode_quality_flags WHERE episode_id = %s ORDER BY flag",
            (episode_id,),
        ).fetchall()
        counts = cur.execute(
            "SELECT count(*) AS labels FROM episode_labels WHERE episode_id = %s",
            (episode_id,),
        ).fetchone()
        retractions = cur.execute(
            "SELECT reason, author, created_at FROM episode_retractions WHERE episode_id = %s "
            "ORDER BY id",
            (episode_id,),
        ).fetchall()
    assert counts is not None
    return {
        **_public(row),
        "quality_flags": [f["flag"] for f in flags],
        "labels": int(counts["labels"]),
        "manifests": count_holders(conn, store, episode_id),
        "retractions": retractions,
    }


def _cursor(cursor: str | None) -> uuid.UUID | None:
    if cursor is None:
        return None
    try:
        return uuid.UUID(cursor)
    except ValueError:
        raise BadRequestError("malformed cursor; pass next_cursor back unchanged") from None


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "id": str(row["id"])}
