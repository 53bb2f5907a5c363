"""A small, deterministic fleet as change batches: robots, tasks, episodes with flags,
labels and statistics, a manifest, then updates, a retraction, a deletion and a truncate.
Applied to two backends, it must give the same curation results."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from tests.warehouse.conftest import Event, batch, episode_row, event, robot
from warehouse.changes import ChangeBatch, Op
from warehouse.rows import Layout, TextRows

EPISODES = 24
_NS = uuid.UUID("7b0e2c9a-3f0c-4a5e-9d55-0f4a1d2c3b4e")
FLAGS = ("camera_blackout", "choppy_joints", "gripper_stuck")


def episode_id(i: int) -> str:
    return str(uuid.uuid5(_NS, f"episode-{i}"))


def _episode(i: int) -> dict[str, Any]:
    start = datetime(2024, 1, 1 + i % 5, 8 + i % 7, tzinfo=UTC)
    seconds = 30 + 7 * i
    return episode_row(
        episode_id(i),
        robot_id=f"r{i % 3 + 1}",
        task_id=f"t{i % 2 + 1}",
        site="lab" if i % 4 else "field",
        operator=["ann", "bob", "Cy"][i % 3],
        started_at=start,
        ended_at=start + timedelta(seconds=seconds),
        start_ns=i * 10**9,
        end_ns=(i + seconds) * 10**9,
        steps=seconds * 10,
        success=i % 5 != 0,
        uri=f"objects/r{i % 3 + 1}/{episode_id(i)}.mcap",
        size_bytes=1000 + i,
        sha256=f"{i:02x}" * 32,
        topics='[{"topic": "/cam/front", "kind": "camera", "rate_hz": 30}]',
        pipeline_version=1 + i % 3,
        qc_report=f'{{"score": {i % 10}, "ok": {"true" if i % 2 else "false"}}}',
    )


def _children(i: int, lsn: int) -> list[Event]:
    eid = episode_id(i)
    events = [
        event(
            Op.CREATE,
            "episode_quality_flags",
            lsn,
            10 + n,
            after={"episode_id": eid, "flag": flag, "detail": "{}"},
        )
        for n, flag in enumerate(FLAGS)
        if (i + n) % 4 == 0
    ]
    for dim in range(2):
        stats = {"episode_id": eid, "field": "state", "dim": dim, "count": 10 + i}
        stats |= {"sum": 1.5 * i + dim, "sum_sq": 2.25 * i, "min": -1.0 * dim, "max": 1.0 + i}
        events.append(event(Op.CREATE, "episode_stats", lsn, 20 + dim, after=stats))
    label = {"id": i, "episode_id": eid, "key": "segment", "value": f"grasp{i % 2}"}
    label |= {"start_ns": (i + 1) * 10**9, "end_ns": (i + 5) * 10**9, "author": "me"}
    events.append(event(Op.CREATE, "episode_labels", lsn, 30, after={**label, "created_at": None}))
    return events


def _seed() -> list[ChangeBatch]:
    first = [event(Op.CREATE, "robots", 100, n, after=robot(f"r{n}", f"arm{n}")) for n in (1, 2, 3)]
    first += [
        event(Op.CREATE, "tasks", 100, 10 + n, after={"id": f"t{n}", "description": f"task {n}"})
        for n in (1, 2)
    ]
    batches = [batch(*first)]
    for group in range(0, EPISODES, 6):  # a few transactions per batch, as the follower cuts
        events = [
            change
            for i in range(group, group + 6)
            for change in (
                event(Op.CREATE, "episodes", 1000 + 100 * i, after=_episode(i)),
                *_children(i, 1000 + 100 * i),
            )
        ]
        batches.append(batch(*events))
    return batches


def _manifest(lsn: int) -> ChangeBatch:
    row: dict[str, Any] = {
        "id": "m1",
        "reuse_key": "k",
        "sql": "SELECT * FROM episodes",
        "sample_spec": "{}",
    }
    row |= {"snapshot_id": 1, "cdc_position": "", "rows": 3, "samples": 9, "size_bytes": 1}
    row |= {"uri": "u", "author": "a", "created_at": datetime(2024, 2, 1, tzinfo=UTC)}
    return batch(event(Op.CREATE, "manifests", lsn, after=row))


def lineage() -> dict[str, pa.Table]:
    """The fleet's lineage, as registration writes it to the warehouse: m1's three episodes,
    and m2's, whose registration never finished (no manifests row: invisible)."""
    return {
        manifest_id: pa.table(
            {
                "episode_id": [episode_id(n) for n in range(count)],
                "sha256": [f"{n:064x}" for n in range(count)],
            }
        )
        for manifest_id, count in (("m1", 3), ("m2", 2))
    }


def _changes(lsn: int) -> ChangeBatch:
    return batch(
        event(Op.UPDATE, "episodes", lsn, 1, after={**_episode(1), "steps": 1}),
        event(Op.UPDATE, "episodes", lsn, 2, after={**_episode(2), "status": "retracted"}),
        event(Op.DELETE, "episodes", lsn, 3, before={"id": episode_id(3)}),
        event(Op.UPDATE, "robots", lsn, 4, after=robot("r2", "arm2b")),
        event(Op.TRUNCATE, "tasks", lsn, 5),
        event(Op.CREATE, "tasks", lsn, 6, after={"id": "t1", "description": "again"}),
        event(
            Op.DELETE,
            "episode_quality_flags",
            lsn,
            7,
            before={"episode_id": episode_id(4), "flag": FLAGS[0]},
        ),
    )


def text_rows(lsn: int) -> ChangeBatch:
    """Two new episodes as the follower stages them (Postgres text values) and an update of
    a stored one whose ``qc_report`` is an unchanged TOAST value."""
    columns = list(_episode(0))
    layout = Layout.of("episodes", columns, ["id"])
    rows = TextRows("episodes")
    for n, i in enumerate((EPISODES, EPISODES + 1)):
        values = {**_episode(i), "started_at": "2024-03-04 05:06:07.25+00", "success": "t"}
        values |= {"ended_at": "2024-03-04 05:07:07.5+01", "control_hz": "Infinity" if n else "10"}
        text = tuple(None if values[c] is None else str(values[c]).encode() for c in columns)
        rows.upsert(layout, text, (lsn, 1 + n))
    changed = {**_episode(5), "steps": 5, "success": "f", "qc_report": None}
    changed |= {"started_at": "2024-03-04 05:06:07.25+00", "ended_at": None}
    text = tuple(None if changed[c] is None else str(changed[c]).encode() for c in columns)
    rows.upsert(layout, text, (lsn, 9), unchanged=[columns.index("qc_report")])
    position = batch(lsn=lsn).position
    return ChangeBatch([rows], position)


def fleet() -> list[ChangeBatch]:
    """Every batch, in commit order."""
    return [*_seed(), _manifest(5000), _changes(6000), text_rows(7000)]
