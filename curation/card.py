"""A manifest's dataset card: what it holds (episodes, hours, robots, tasks and sites, success
rate, quality flags, stamp ranges), how the loader normalizes it (mean and standard deviation
per state and action dimension, from the file's statistics), and where it comes from (SQL,
sample spec, warehouse snapshot, CDC position).

The breakdowns read the warehouse at the manifest's pinned snapshot, for exactly the
manifest's episodes (passed as an Arrow table with each one's slices and log time from the
file), so the card describes the manifest as it was built, whatever changed since. Hours are
the log time of the manifest's slices (integer nanoseconds summed, over 3.6e12); rates are
fractions of the manifest's episodes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot

from curation.build import CurationLimits, CurationSource, run_query
from curation.errors import BadRequestError
from curation.registration import position_object
from manifests.manifest import Manifest
from manifests.schema import END_NS, EPISODE_ID, START_NS

#: The Arrow table of the manifest's episodes the card's queries read.
CARD_EPISODES = "card_episodes"
NS_PER_HOUR = 3_600 * 10**9
BREAKDOWNS = {"by_robot": "robot_id", "by_task": "task_id", "by_site": "site"}
STAMPS = ("schema_version", "pipeline_version", "robot_sw_version")
_GROUPS = (
    "SELECT e.robot_id, e.task_id, e.site, e.success, e.schema_version, e.pipeline_version, "
    "e.robot_sw_version, count(*) AS episodes, sum(c.duration_ns) AS duration_ns "
    f"FROM {CARD_EPISODES} AS c JOIN episodes AS e ON e.id = c.episode_id "
    "GROUP BY e.robot_id, e.task_id, e.site, e.success, e.schema_version, e.pipeline_version, "
    "e.robot_sw_version"
)
_FLAGS = (
    "SELECT q.flag, count(DISTINCT q.episode_id) AS episodes FROM episode_quality_flags AS q "
    f"WHERE q.episode_id IN (SELECT episode_id FROM {CARD_EPISODES}) GROUP BY q.flag"
)


def manifest_card(
    manifest: Manifest,
    entry: dict[str, Any],
    source: CurationSource,
    limits: CurationLimits,
) -> dict[str, Any]:
    """The card of ``manifest``, whose registry row is ``entry``, read from ``source`` at
    the manifest's snapshot."""
    snapshot = manifest.snapshot_id
    if not isinstance(snapshot, int):
        raise BadRequestError(
            f"manifest {entry['id']} records no warehouse snapshot to describe it at",
            reason="no_snapshot",
            manifest_id=entry["id"],
        )
    episodes = _episodes(manifest)
    tables = {CARD_EPISODES: episodes}

    def rows(sql: str) -> list[dict[str, Any]]:
        tree = sqlglot.parse_one(sql, read="duckdb")
        table = run_query(tree, source, snapshot, limits, internal=True, tables=tables)
        return list(table.to_pylist())

    groups = rows(_GROUPS)
    flags = rows(_FLAGS)
    total = episodes.num_rows
    card: dict[str, Any] = {
        "manifest_id": entry["id"],
        "name": entry["name"],
        "tags": list(entry["tags"]),
        "description": entry["description"],
        "author": entry["author"],
        "created_at": entry["created_at"],
        "retired_at": entry["retired_at"],
        "format_version": manifest.meta.format_version,
        "slices": manifest.num_rows,
        "samples": manifest.num_samples,
        "size_bytes": entry["size_bytes"],
        "episodes": total,
        "episodes_described": sum(int(g["episodes"]) for g in groups),
        **_totals(groups),
    }
    for name, column in BREAKDOWNS.items():
        card[name] = _breakdown(groups, column)
    card["quality_flags"] = sorted(
        (
            {"flag": f["flag"], "episodes": int(f["episodes"]), "rate": _rate(f["episodes"], total)}
            for f in flags
        ),
        key=lambda f: (-f["episodes"], f["flag"]),
    )
    card["stamps"] = {stamp: _stamp_range(groups, stamp) for stamp in STAMPS}
    card["normalization"] = _normalization(manifest)
    card.update(
        sql=manifest.sql,
        sample_spec=manifest.sample_spec,
        snapshot_id=snapshot,
        cdc_position=_position(manifest.cdc_position),
    )
    return card


def _episodes(manifest: Manifest) -> pa.Table:
    """One row per episode of the manifest: its id and the log time of its slices."""
    slices = manifest.table([EPISODE_ID, START_NS, END_NS])
    durations = pc.subtract(slices[END_NS], slices[START_NS])
    per_slice = pa.table({"episode_id": slices[EPISODE_ID], "duration_ns": durations})
    grouped = per_slice.group_by("episode_id").aggregate([("duration_ns", "sum")])
    return grouped.rename_columns(["episode_id", "duration_ns"])


def _totals(groups: list[dict[str, Any]]) -> dict[str, Any]:
    episodes = sum(int(g["episodes"]) for g in groups)
    successes = sum(int(g["episodes"]) for g in groups if g["success"])
    return {
        "hours": sum(int(g["duration_ns"] or 0) for g in groups) / NS_PER_HOUR,
        "success_rate": _rate(successes, episodes),
    }


def _breakdown(groups: list[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    """Episodes, hours and success rate per value of ``column``, most hours first."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for group in groups:
        by_key[str(group[column])].append(group)
    out = [
        {"key": key, "episodes": sum(int(g["episodes"]) for g in part), **_totals(part)}
        for key, part in by_key.items()
    ]
    return sorted(out, key=lambda item: (-item["hours"], item["key"]))


def _stamp_range(groups: list[dict[str, Any]], stamp: str) -> dict[str, Any]:
    """The lowest and highest value of a stamp (dotted versions compared part by part as
    numbers) and the episodes per value, in that order."""
    counts: dict[str, int] = defaultdict(int)
    for group in groups:
        counts[str(group[stamp])] += int(group["episodes"])
    values = sorted(counts, key=_version_key)
    return {
        "min": values[0] if values else None,
        "max": values[-1] if values else None,
        "values": [{"version": v, "episodes": counts[v]} for v in values],
    }


def _version_key(value: str) -> tuple[tuple[int, int | str], ...]:
    """``1.10`` after ``1.9``: numeric parts as numbers, others as text after them."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-+]", value))


def _normalization(manifest: Manifest) -> dict[str, Any]:
    """Per field: the steps counted, and mean, standard deviation (as the loader divides by
    it, floored at 1e-6), minimum and maximum per dimension."""
    out: dict[str, Any] = {}
    for name in sorted(manifest.norm_stats):
        stats = manifest.field_stats(name)
        if stats is None:
            continue
        out[name] = {
            "count": stats.count,
            "mean": stats.mean().tolist(),
            "std": stats.std().tolist(),
            "min": None if stats.min is None else stats.min.tolist(),
            "max": None if stats.max is None else stats.max.tolist(),
        }
    return out


def _position(position: dict[str, Any] | str | None) -> dict[str, Any] | None:
    """The file's CDC position as an object (a version-1 file holds its JSON text)."""
    return position if not isinstance(position, str) else position_object(position)


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None
