"""Corpus statistics: a few aggregates over the curation views, all at one warehouse snapshot.
The queries are written in DuckDB's dialect and rendered for the warehouse's backend.

Durations are in hours (the ``episodes`` view's ``duration_s`` summed, over 3,600); rates are
fractions in [0, 1] of the episodes counted, ``None`` when there are none.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
import sqlglot
from sqlglot import exp

# Breakdowns by these columns of the ``episodes`` view, under these names.
BREAKDOWNS = {"by_robot": "robot_id", "by_task": "task_id", "by_site": "site"}
STAMPS = ("schema_version", "pipeline_version", "robot_sw_version")

_TOTALS = (
    "SELECT count(*) AS episodes, coalesce(sum(duration_s), 0) / 3600 AS hours, "
    "avg(CAST(success AS DOUBLE)) AS success_rate FROM episodes"
)
_FLAGS = (
    "SELECT flag, count(DISTINCT episode_id) AS episodes FROM episode_quality_flags "
    "GROUP BY flag ORDER BY episodes DESC, flag"
)


class StatsSource(Protocol):
    """What the statistics need of the warehouse: bounded reads at a snapshot, in the SQL
    dialect (sqlglot's name) ``dialect``."""

    @property
    def dialect(self) -> str: ...

    def query_arrow(
        self, sql: str, *, snapshot_id: int | None, timeout_s: float, max_rows: int
    ) -> pa.Table: ...


def corpus_stats(
    source: StatsSource, snapshot_id: int, *, timeout_s: float, max_rows: int
) -> dict[str, Any]:
    """Episodes, hours and success rate overall and by robot, task and site; the share of
    episodes raising each quality flag; episode counts by stamp version."""

    def rows(sql: str) -> list[dict[str, Any]]:
        rendered = sqlglot.transpile(sql, read="duckdb", write=source.dialect)[0]
        table = source.query_arrow(
            rendered, snapshot_id=snapshot_id, timeout_s=timeout_s, max_rows=max_rows
        )
        return list(table.to_pylist())

    totals = rows(_TOTALS)[0]
    total = int(totals["episodes"])
    stats: dict[str, Any] = {"snapshot_id": snapshot_id, **_group(totals)}
    for name, column in BREAKDOWNS.items():
        stats[name] = [{"key": row["key"], **_group(row)} for row in rows(_breakdown(column))]
    stats["quality_flags"] = [
        {"flag": row["flag"], "episodes": row["episodes"], "rate": _rate(row["episodes"], total)}
        for row in rows(_FLAGS)
    ]
    stamps: dict[str, list[dict[str, Any]]] = {stamp: [] for stamp in STAMPS}
    for row in rows(_stamps()):
        stamps[row["stamp"]].append({"version": row["version"], "episodes": row["episodes"]})
    stats["stamps"] = stamps
    return stats


def _group(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "episodes": int(row["episodes"]),
        "hours": float(row["hours"] or 0.0),
        "success_rate": row["success_rate"],
    }


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def _breakdown(column: str) -> str:
    return (
        exp.select(
            exp.cast(exp.column(column), "varchar").as_("key"),
            "count(*) AS episodes",
            "sum(duration_s) / 3600 AS hours",
            "avg(CAST(success AS DOUBLE)) AS success_rate",
        )
        .from_("episodes")
        .group_by("1")
        .order_by("hours DESC", "key")
        .sql(dialect="duckdb")
    )


def _stamps() -> str:
    parts = [
        exp.select(
            exp.Literal.string(stamp).as_("stamp"),
            exp.cast(exp.column(stamp), "varchar").as_("version"),
            "count(*) AS episodes",
        )
        .from_("episodes")
        .group_by("1", "2")
        for stamp in STAMPS
    ]
    union: exp.Query = parts[0]
    for part in parts[1:]:
        union = union.union(part, distinct=False)
    return union.order_by("stamp", "version").sql(dialect="duckdb")
