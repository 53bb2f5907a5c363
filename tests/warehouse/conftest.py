"""Helpers that build change events the way the follower and Debezium produce them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from warehouse.changes import ChangeBatch, ChangeEvent, Op, Position, Source

SLOT = "test_slot"


def source(table: str, lsn: int, seq: int = 1) -> Source:
    return Source(table=table, lsn=lsn, seq=seq, ts_ms=1_700_000_000_000, tx_id=lsn)


def event(
    op: Op,
    table: str,
    lsn: int,
    seq: int = 1,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    unchanged: frozenset[str] = frozenset(),
) -> ChangeEvent:
    return ChangeEvent(op, source(table, lsn, seq), before=before, after=after, unchanged=unchanged)


def batch(*events: ChangeEvent, lsn: int | None = None) -> ChangeBatch:
    top = lsn if lsn is not None else max((e.source.lsn for e in events), default=0)
    return ChangeBatch(
        list(events), Position(lsn=top + 8, snapshot_lsn=1, slot=SLOT, commit_lsn=top, tx_id=top)
    )


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
