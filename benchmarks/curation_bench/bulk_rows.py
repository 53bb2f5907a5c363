"""Bulk episode rows for the SQL-alone sizes, generated inside DuckDB from ``range()`` and
inserted straight into the DuckLake mirror tables, with the columns CDC writes (source
columns plus ``_lsn``, ``_seq``, ``_deleted``). This is a benchmark of the curation path, not
of CDC: 43M rows through Postgres and the follower would measure those instead.

The rows follow the synthetic fleet's shape: its robots (with their sites and software
versions), tasks and operators drawn uniformly from a hash of the row number, half of them
successful, ``flag_rate`` of them with one QC flag (and its list in
``mirror.episode_flag_lists``), 1 to 2 s long at 50 Hz. Ids are UUIDs
``b0000000-0000-4000-8000-<row number>``, which never collide with the fleet's (UUIDv5).
"""

from __future__ import annotations

import re
import time
from typing import Any

import duckdb
from pinned import BULK_PREFIX, Params

from episodes.synth import OPERATORS, ROBOTS, TASKS
from warehouse.config import WarehouseConfig
from warehouse.ducklake.connection import attach_lake, new_database

FLAGS = ("camera_blackout", "choppy_joints", "dropped_frames")
BULK_EPOCH_NS = 1_780_000_000 * 10**9  # 2026-05-28: after the fleet's own episodes
CONTROL_PERIOD_NS = 20_000_000  # 50 Hz

# One row per number in [$start, $stop): the draws, from disjoint digits of one hash.
_DRAWS = """
SELECT i,
       CAST(printf('b0000000-0000-4000-8000-%012x', i) AS UUID) AS id,
       CAST(h % 6 AS BIGINT) + 1 AS robot, CAST((h // 6) % 3 AS BIGINT) + 1 AS task,
       CAST((h // 18) % 5 AS BIGINT) + 1 AS operator,
       (h // 90) % 2 = 0 AS success, (h // 180) % 10000 < $flag_per_10k AS flagged,
       CAST((h // 1800000) % 3 AS BIGINT) + 1 AS flag,
       CAST((h // 5400000) % 51 AS INTEGER) + 50 AS steps,
       hash(i, $seed, 1) AS h1
FROM (SELECT i, hash(i, $seed) AS h FROM range($start, $stop) AS r(i))
"""
_EPISODES = f"""
INSERT INTO mirror.episodes
SELECT id, $robots[robot], $tasks[task], $sites[robot], $operators[operator],
       to_timestamp(start_ns / 1e9), to_timestamp(end_ns / 1e9), start_ns, end_ns,
       steps, 50.0, success,
       printf('%s/%s/b0000000-0000-4000-8000-%012x.mcap', $prefix, $robots[robot], i),
       20000 + h1 % 20000,
       printf('%016x%016x%016x%016x', h1, hash(i, $seed, 2), hash(i, $seed, 3), hash(i, $seed, 4)),
       CAST($topics AS JSON), 'active', 1, 1, $versions[robot],
       CAST('{{"bulk": true}}' AS JSON), now(), now(), 1, 0, false,
       NULL  -- instruction (warehouse migration 0005 added it after the meta columns)
FROM (
    SELECT *, {BULK_EPOCH_NS} + i * 1000000000 AS start_ns,
           {BULK_EPOCH_NS} + i * 1000000000 + steps * {CONTROL_PERIOD_NS} AS end_ns
    FROM ({_DRAWS})
)
"""
_FLAGS = f"""
INSERT INTO mirror.episode_quality_flags
SELECT id, $flags[flag], CAST('{{}}' AS JSON), 1, 0, false
FROM ({_DRAWS})
WHERE flagged
"""
# Each flagged row's list of flags with its robot and task (warehouse migration 0008), as the
# backend keeps it in the commit that writes the flags: a bulk row has one flag.
_FLAG_LISTS = f"""
INSERT INTO mirror.episode_flag_lists
SELECT id, $robots[robot], $tasks[task], [$flags[flag]]
FROM ({_DRAWS})
WHERE flagged
"""


def _params(p: Params, topics: str, start: int, stop: int) -> dict[str, Any]:
    return {
        "start": start,
        "stop": stop,
        "seed": p.seed,
        "flag_per_10k": round(p.bulk_flag_rate * 10_000),
        "robots": [r.robot_id for r in ROBOTS],
        "sites": [r.site for r in ROBOTS],
        "versions": [r.sw_version for r in ROBOTS],
        "tasks": list(TASKS),
        "operators": list(OPERATORS),
        "prefix": BULK_PREFIX,
        "topics": topics,
        "flags": list(FLAGS),
    }


def add_bulk_rows(
    config: WarehouseConfig,
    p: Params,
    topics: str,
    start: int,
    stop: int,
    *,
    flag_lists: bool = True,
) -> float:
    """Insert bulk rows ``[start, stop)`` (and their flags; their flag lists unless the lake
    predates migration 0008: ``flag_lists=False``), ``p.bulk_chunk_rows`` per commit; return
    the seconds it took."""
    started = time.perf_counter()
    con = new_database(threads=2)
    try:
        attach_lake(con, config, read_only=False)
        for low in range(start, stop, p.bulk_chunk_rows):
            high = min(stop, low + p.bulk_chunk_rows)
            _insert(con, _params(p, topics, low, high), flag_lists)
    finally:
        con.close()
    return time.perf_counter() - started


def _insert(con: duckdb.DuckDBPyConnection, params: dict[str, Any], flag_lists: bool) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        for statement in (_EPISODES, _FLAGS, _FLAG_LISTS) if flag_lists else (_EPISODES, _FLAGS):
            used = set(re.findall(r"\$(\w+)", statement))  # DuckDB refuses unused names
            con.execute(statement, {k: v for k, v in params.items() if k in used})
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
