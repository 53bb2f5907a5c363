"""The manifest registry in Postgres: what was built, by whom, when."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from service.errors import BadRequestError, NotFoundError

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
