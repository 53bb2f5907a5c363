"""Episode enrichment and retraction in the operational database.

Labels (``episode_labels``) are key/value pairs on an episode; a *segment* label also carries
a log-time range ``[start_ns, end_ns)`` (integer nanoseconds) inside the episode, which
structured curations can slice by. Both reach the warehouse's curation views by CDC.

A retraction sets the episode's status to ``retracted``: the ``episodes`` view (and the views
built on it) leave it out, so it leaves every new curation; manifests already built keep it,
and the retraction lists them. A restore sets it back to ``active``; the retraction log
(``episode_retractions``) keeps its rows, and the service's log says who restored it.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from curation.errors import BadRequestError, NotFoundError
from curation.lineage import LineageStore
from curation.registry import manifests_containing, require_episode

log = logging.getLogger(__name__)
_LABEL_COLUMNS = "id, episode_id, key, value, start_ns, end_ns, author, created_at"


class LabelRangeError(BadRequestError):
    """A segment label does not lie inside its episode's log-time range."""

    title = "Segment outside the episode"
    status = 422


@dataclass(frozen=True)
class Label:
    """One label; ``start_ns``/``end_ns`` (integer nanoseconds, log time) make it a segment."""

    key: str
    value: str
    start_ns: int | None = None
    end_ns: int | None = None


def add_labels(
    conn: psycopg.Connection[Any], episode_id: uuid.UUID, labels: list[Label], author: str
) -> list[dict[str, Any]]:
    """Write ``labels`` on the episode in one transaction and return the stored rows."""
    episode = require_episode(conn, episode_id)
    for label in labels:
        _check_segment(label, episode)
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        rows = [
            cur.execute(
                "INSERT INTO episode_labels (episode_id, key, value, start_ns, end_ns, author)"
                f" VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_LABEL_COLUMNS}",
                (episode_id, label.key, label.value, label.start_ns, label.end_ns, author),
            ).fetchone()
            for label in labels
        ]
    return [_public(row) for row in rows if row is not None]


def list_labels(conn: psycopg.Connection[Any], episode_id: uuid.UUID) -> list[dict[str, Any]]:
    """The episode's labels, oldest first."""
    require_episode(conn, episode_id)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            f"SELECT {_LABEL_COLUMNS} FROM episode_labels WHERE episode_id = %s ORDER BY id",
            (episode_id,),
        ).fetchall()
    return [_public(row) for row in rows]


def retract_episode(
    conn: psycopg.Connection[Any],
    store: LineageStore,
    episode_id: uuid.UUID,
    reason: str,
    author: str,
) -> dict[str, Any]:
    """Retract the episode (idempotent) and list the manifests that already hold it."""
    with conn.transaction():
        row = conn.execute(
            "SELECT status FROM episodes WHERE id = %s FOR UPDATE", (episode_id,)
        ).fetchone()
        if row is None:
            require_episode(conn, episode_id)  # raises the 404
        already = row is not None and row[0] == "retracted"
        if not already:
            conn.execute(
                "UPDATE episodes SET status = 'retracted', updated_at = now() WHERE id = %s",
                (episode_id,),
            )
            conn.execute(
                "INSERT INTO episode_retractions (episode_id, reason, author) VALUES (%s, %s, %s)",
                (episode_id, reason, author),
            )
    return {
        "episode_id": str(episode_id),
        "status": "retracted",
        "already_retracted": already,
        "manifests": manifests_containing(conn, store, episode_id),
    }


def restore_episode(
    conn: psycopg.Connection[Any], episode_id: uuid.UUID, author: str
) -> dict[str, Any]:
    """Undo a retraction (idempotent): the episode is active again and, once CDC carries the
    change, back in new curations."""
    with conn.transaction():
        row = conn.execute(
            "SELECT status FROM episodes WHERE id = %s FOR UPDATE", (episode_id,)
        ).fetchone()
        if row is None:
            require_episode(conn, episode_id)  # raises the 404
        already = row is not None and row[0] == "active"
        if not already:
            conn.execute(
                "UPDATE episodes SET status = 'active', updated_at = now() WHERE id = %s",
                (episode_id,),
            )
            log.info("episode %s restored by %s", episode_id, author)
    return {"episode_id": str(episode_id), "status": "active", "already_active": already}


def remove_label(
    conn: psycopg.Connection[Any], episode_id: uuid.UUID, label_id: int
) -> dict[str, Any]:
    """Delete label ``label_id`` of the episode and return the row it was; curations stop
    seeing it once CDC carries the delete."""
    require_episode(conn, episode_id)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            f"DELETE FROM episode_labels WHERE id = %s AND episode_id = %s "
            f"RETURNING {_LABEL_COLUMNS}",
            (label_id, episode_id),
        ).fetchone()
    if row is None:
        raise NotFoundError(
            f"episode {episode_id} has no label {label_id}",
            episode_id=str(episode_id),
            label_id=label_id,
        )
    return _public(row)


def _check_segment(label: Label, episode: dict[str, Any]) -> None:
    if label.start_ns is None or label.end_ns is None:
        return
    if label.start_ns < episode["start_ns"] or label.end_ns > episode["end_ns"]:
        raise LabelRangeError(
            f"segment [{label.start_ns}, {label.end_ns}) of label {label.key!r} is not inside "
            f"the episode's log-time range [{episode['start_ns']}, {episode['end_ns']})",
            reason="segment_out_of_range",
            episode_id=str(episode["id"]),
        )


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "episode_id": str(row["episode_id"])}
