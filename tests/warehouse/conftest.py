"""Helpers that build change batches the way the follower and Debezium stage them: typed test
values rendered to the Postgres text form by :func:`warehouse.rows.text_value` (the renderer
the Debezium endpoint uses), folded into :class:`warehouse.rows.TextRows` per table."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from warehouse.changes import ChangeBatch, Op, Position
from warehouse.rows import Layout, TextRows, text_value

SLOT = "test_slot"
#: Key columns of the mirrored tables the tests write (``sql/warehouse``; ``sites`` is one
#: a test creates); any other table is keyed by ``id``.
KEYS: dict[str, tuple[str, ...]] = {
    "episode_quality_flags": ("episode_id", "flag"),
    "episode_stats": ("episode_id", "field", "dim"),
    "episode_evaluations": ("checkpoint_id", "episode_id"),
    "manifest_episodes": ("manifest_id", "episode_id"),
    "sites": ("name",),
}


@dataclass(frozen=True)
class Event:
    """One row change with typed values, versioned ``(lsn, seq)``. ``unchanged`` names the
    columns of ``after`` that were not sent (unchanged TOAST values)."""

    op: Op
    table: str
    lsn: int
    seq: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    unchanged: frozenset[str]


def event(
    op: Op,
    table: str,
    lsn: int,
    seq: int = 1,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    unchanged: frozenset[str] = frozenset(),
) -> Event:
    return Event(op, table, lsn, seq, before, after, unchanged)


def batch(*events: Event, lsn: int | None = None) -> ChangeBatch:
    """The events folded per table, in order; no events is a heartbeat at ``lsn``.

    A table's layout is every column its events name (key first); a column an event lacks
    is unchanged (the stored value, or the batch's earlier one, is kept), as for Debezium."""
    top = lsn if lsn is not None else max((e.lsn for e in events), default=0)
    staged: dict[str, TextRows] = {}
    for table in dict.fromkeys(e.table for e in events):
        mine = [e for e in events if e.table == table]
        staged[table] = _stage(table, mine)
    position = Position(lsn=top + 8, snapshot_lsn=1, slot=SLOT, commit_lsn=top, tx_id=top)
    return ChangeBatch(list(staged.values()), position)


def _stage(table: str, events: list[Event]) -> TextRows:
    key = KEYS.get(table, ("id",))
    names = dict.fromkeys(key)
    for e in events:
        names.update(dict.fromkeys([*(e.before or {}), *(e.after or {})]))
    layout = Layout.of(table, list(names), key)
    rows = TextRows(table)
    for e in events:
        version = (e.lsn, e.seq)
        if e.op is Op.TRUNCATE:
            rows.truncate(version)
        elif e.op is Op.DELETE:
            rows.delete(layout, _text(layout, e.before or {}), version)
        else:
            after = e.after or {}
            unchanged = [
                i for i, c in enumerate(layout.columns) if c not in after or c in e.unchanged
            ]
            old = _text(layout, e.before) if e.op is Op.UPDATE and e.before else None
            rows.update(layout, old, _text(layout, after), version, unchanged)
    return rows


def _text(layout: Layout, row: dict[str, Any]) -> tuple[bytes | None, ...]:
    return tuple(text_value(row.get(name)) for name in layout.columns)


def robot(robot_id: str = "r1", model: str = "arm") -> dict[str, Any]:
    return {
        "id": robot_id,
        "model": model,
        "site": "lab",
        "created_at": datetime(2024, 1, 1, tzinfo=UTC),
    }


def episode_row(episode_id: str | None = None, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": episode_id or str(uuid.uuid4()),
        "robot_id": "r1",
        "task_id": "t1",
        "site": "lab",
        "operator": "ann",
        "started_at": datetime(2024, 1, 1, 12, tzinfo=UTC),
        "ended_at": datetime(2024, 1, 1, 12, 1, tzinfo=UTC),
        "start_ns": 0,
        "end_ns": 60_000_000_000,
        "steps": 600,
        "control_hz": 10.0,
        "success": True,
        "uri": f"objects/{uuid.uuid4()}.mcap",
        "size_bytes": 1234,
        "sha256": "ab" * 32,
        "topics": '[{"topic": "/cam", "rate_hz": 30}]',
        "status": "active",
        "schema_version": 1,
        "pipeline_version": 1,
        "robot_sw_version": "1.0",
        "qc_report": "{}",
        "created_at": datetime(2024, 1, 1, tzinfo=UTC),
        "updated_at": datetime(2024, 1, 1, tzinfo=UTC),
    }
    row.update(overrides)
    return row
