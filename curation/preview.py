"""A curation's preview: what its manifest would hold, per robot and task, without building it.

One aggregate query at the snapshot a build would read (the current one); samples are counted
in SQL the way the build counts them (``SampleSpec.count_samples``), so a preview's totals
equal the manifest's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from curation.build import (
    CurationLimits,
    CurationRequest,
    CurationSource,
    check_request,
    pin,
    run_query,
)
from curation.cancel import CancelScope
from curation.compose import PREVIEW_CARRY, compose, preview_query, probe_query

NS_PER_HOUR = 3_600 * 10**9


@dataclass(frozen=True)
class PreviewGroup:
    """One (robot, task): episodes, slices, hours of log time and samples it contributes."""

    robot_id: str
    task_id: str
    episodes: int
    slices: int
    hours: float
    samples: int


@dataclass(frozen=True)
class Preview:
    """A curation's preview: the SQL that would run, the snapshot it would read, the totals
    and the per-(robot, task) groups, sorted by robot then task."""

    sql: str
    snapshot_id: int
    sample_spec: dict[str, Any]
    totals: PreviewGroup
    groups: list[PreviewGroup]

    def to_dict(self) -> dict[str, Any]:
        totals = asdict(self.totals)
        del totals["robot_id"], totals["task_id"]
        return {
            "sql": self.sql,
            "snapshot_id": self.snapshot_id,
            "sample_spec": self.sample_spec,
            "totals": totals,
            "groups": [asdict(group) for group in self.groups],
        }


def preview_curation(
    request: CurationRequest,
    source: CurationSource,
    limits: CurationLimits,
    scope: CancelScope | None = None,
) -> Preview:
    """Counts, hours and samples of the manifest ``request`` would build now."""
    checked, spec = check_request(request)
    snapshot, _ = pin(checked, source)
    probe = run_query(probe_query(checked), source, snapshot, limits, scope, internal=True)
    composed = compose(checked, probe.column_names, PREVIEW_CARRY)
    query = preview_query(composed, spec.anchor_step_ns)
    rows = run_query(query, source, snapshot, limits, scope, internal=True).to_pylist()
    groups = [
        PreviewGroup(
            robot_id=str(row["robot_id"]),
            task_id=str(row["task_id"]),
            episodes=int(row["episodes"]),
            slices=int(row["slices"]),
            hours=int(row["duration_ns"]) / NS_PER_HOUR,
            samples=int(row["samples"]),
        )
        for row in rows
    ]
    totals = PreviewGroup(
        robot_id="",
        task_id="",
        episodes=sum(g.episodes for g in groups),
        slices=sum(g.slices for g in groups),
        hours=sum(int(row["duration_ns"]) for row in rows) / NS_PER_HOUR,
        samples=sum(g.samples for g in groups),
    )
    return Preview(checked.normalized, snapshot, spec.to_dict(), totals, groups)
