"""The manifest registry in Postgres: what was built, by whom, when, and from which episodes
(the manifests that hold an episode, by the lineage of :mod:`curation.lineage`); manifests
named by ID or unique ID prefix; their name, tags, description and retirement; their pulls.

(Registering a built manifest is :mod:`curation.registration`.)
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from curation.errors import AmbiguousManifestError, BadRequestError, NotFoundError
from curation.lineage import LineageStore, holders
from manifests.errors import ManifestIdError
from manifests.manifest import manifest_ref

_COLUMNS = (
    "id, rows, samples, size_bytes, snapshot_id, cdc_position, sql, sample_spec, "
    "author, created_at, uri, name, tags, description, retired_at"
)
#: Candidates an ambiguous prefix's refusal names, at most.
MAX_CANDIDATES = 10


def get_manifest(conn: psycopg.Connection[Any], ref: str, *, lock: bool = False) -> dict[str, Any]:
    """The registry row of the manifest ``ref`` names: its ID, or a prefix of at least 8 hex
    digits that no other registered manifest's ID starts with. ``lock`` locks the row for
    the caller's transaction.

    :raises BadRequestError: ``ref`` is neither (``reason: manifest_id``).
    :raises NotFoundError: no registered manifest's ID is or starts with ``ref``.
    :raises AmbiguousManifestError: several do; ``candidates`` names them.
    """
    key = _manifest_key(ref)
    exact = len(key) == 64
    query = f"SELECT {_COLUMNS} FROM manifests WHERE " + (
        "id = %s" if exact else "id LIKE %s ORDER BY id LIMIT %s"
    )
    params: tuple[Any, ...] = (key,) if exact else (key + "%", MAX_CANDIDATES + 1)
    with conn.cursor(row_factory=dict_row) as cursor:
        rows = cursor.execute(query + (" FOR UPDATE" if lock else ""), params).fetchall()
    if not rows:
        raise NotFoundError(f"no manifest {ref.strip()!r}", manifest_id=key)
    if len(rows) > 1:
        candidates = [row["id"] for row in rows[:MAX_CANDIDATES]]
        more = " and more" if len(rows) > MAX_CANDIDATES else ""
        raise AmbiguousManifestError(
            f"manifest ID prefix {key!r} is ambiguous: {', '.join(candidates)}{more}; "
            "give more of its digits",
            reason="ambiguous_manifest_id",
            manifest_id=key,
            candidates=candidates,
        )
    return rows[0]


def _manifest_key(ref: str) -> str:
    try:
        return manifest_ref(ref)
    except ManifestIdError as error:
        raise BadRequestError(error.message, reason="manifest_id") from None


def list_manifests(
    conn: psycopg.Connection[Any], limit: int, cursor: str | None, *, tag: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first, keyset-paginated by (created_at, id); only those tagged ``tag`` when
    given (retired ones are listed too, with their ``retired_at``)."""
    after = _decode_cursor(cursor) if cursor else None
    where = ["(created_at, id) < (%s, %s)"] if after else []
    params: list[Any] = list(after) if after else []
    if tag is not None:
        where.append("tags @> ARRAY[%s]::text[]")
        params.append(tag)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    query = f"SELECT {_COLUMNS} FROM manifests {clause} ORDER BY created_at DESC, id DESC LIMIT %s"
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, (*params, limit + 1)).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = _encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
    return rows, next_cursor


@dataclass(frozen=True)
class ManifestChange:
    """An edit of a manifest's registry entry; ``None`` (or empty) leaves a field as it is.

    :param retired: retire the manifest (its file may then be garbage-collected, unless
        pulled or tagged), or bring it back.
    """

    name: str | None = None
    description: str | None = None
    add_tags: tuple[str, ...] = ()
    remove_tags: tuple[str, ...] = ()
    retired: bool | None = None


def update_manifest(
    conn: psycopg.Connection[Any], ref: str, change: ManifestChange
) -> dict[str, Any]:
    """Apply ``change`` to the manifest ``ref`` names (see :func:`get_manifest`), in one
    transaction, and return its row as it is now."""
    with conn.transaction():
        row = get_manifest(conn, ref, lock=True)
        with conn.cursor(row_factory=dict_row) as cur:
            updated = cur.execute(
                "UPDATE manifests SET name = COALESCE(%s, name), "
                "description = COALESCE(%s, description), tags = ARRAY(SELECT DISTINCT t "
                "FROM unnest(tags || %s::text[]) AS t WHERE t <> ALL(%s::text[]) ORDER BY t), "
                # retire (keeping the first time), bring back (NULL), or leave as it is
                "retired_at = CASE WHEN %s::boolean IS NULL THEN retired_at "
                "WHEN %s THEN COALESCE(retired_at, now()) END "
                f"WHERE id = %s RETURNING {_COLUMNS}",
                (
                    change.name,
                    change.description,
                    list(change.add_tags),
                    list(change.remove_tags),
                    change.retired,
                    change.retired,
                    row["id"],
                ),
            ).fetchone()
    if updated is None:  # locked above; nothing deletes registry rows
        raise NotFoundError(f"no manifest {ref!r}", manifest_id=row["id"])
    return updated


def record_pull(
    conn: psycopg.Connection[Any],
    manifest_id: str,
    *,
    principal: str,
    run: str = "",
    client: str = "",
    address: str = "",
) -> None:
    """Record a download of manifest ``manifest_id`` (a full, registered ID): who (the
    token's name), for which ``run``, with which ``client`` (its User-Agent), from where."""
    conn.execute(
        "INSERT INTO manifest_pulls (manifest_id, principal, run, client, address) "
        "VALUES (%s, %s, %s, %s, %s)",
        (manifest_id, principal, run, client, address),
    )


def pulls_of(conn: psycopg.Connection[Any], manifest_id: str) -> dict[str, Any]:
    """How often manifest ``manifest_id`` was pulled, and its last pull (``None`` if never)."""
    with conn.cursor(row_factory=dict_row) as cur:
        count = cur.execute(
            "SELECT count(*) AS n FROM manifest_pulls WHERE manifest_id = %s", (manifest_id,)
        ).fetchone()
        last = cur.execute(
            "SELECT principal, run, client, address, pulled_at FROM manifest_pulls "
            "WHERE manifest_id = %s ORDER BY pulled_at DESC, id DESC LIMIT 1",
            (manifest_id,),
        ).fetchone()
    return {"count": int(count["n"]) if count else 0, "last": last}


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
    conn: psycopg.Connection[Any],
    store: LineageStore,
    episode_id: uuid.UUID,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """The registered manifests that hold ``episode_id`` (by the warehouse's lineage),
    newest first (at most ``limit``)."""
    stored = holders(store, episode_id)
    if not stored:
        return []
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            f"SELECT {_REF_COLUMNS} FROM manifests m WHERE m.id = ANY(%s) "
            "ORDER BY m.created_at DESC, m.id DESC LIMIT %s",
            (stored, limit),
        ).fetchall()


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
