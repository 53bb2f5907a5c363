"""What keeping ``mirror.episode_flag_lists`` (DuckLake migration 0008) costs a CDC batch.

Two lakes on one Postgres (pgserver wheel, a temp folder), each holding the same bulk episode
rows (``curation_bench/bulk_rows.py``, 10% flagged): ``before`` bootstrapped from the SQL files
of the release before 0008 (the flags aggregated in the view: no upkeep), ``after`` from
today's. The same change batches are applied to both, taking turns: each batch writes
``--new`` new episodes with one flag each (an ingest commit) and raises a first flag on one
bulk episode (a later QC run: the upkeep's one lookup over every episode id). Prints one JSON
line: each lake's median and p90 milliseconds per batch (the first two batches of each are
warm-up) and ``upkeep_ratio``, after over before.

    python benchmarks/flag_lists.py [--small] [--episodes N] [--batches K] [--new M]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks" / "curation_bench")]

from bulk_rows import add_bulk_rows  # noqa: E402
from pinned import Params  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from quarry.stack.paths import StatePaths  # noqa: E402
from quarry.stack.postgres import EmbeddedPostgres  # noqa: E402
from warehouse.changes import ChangeBatch, Position  # noqa: E402
from warehouse.config import DuckLakeConfig  # noqa: E402
from warehouse.ducklake.backend import DuckLakeWarehouse  # noqa: E402
from warehouse.rows import Layout, TextRows, text_value  # noqa: E402
from warehouse.sqlfiles import SQL_ROOT  # noqa: E402

BEFORE_VIEWS = ROOT / "tests" / "warehouse" / "data" / "ducklake_views_before_0008.sql"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="20k episodes, 12 batches")
    parser.add_argument("--episodes", type=int, help="bulk episodes per lake (200,000)")
    parser.add_argument("--batches", type=int, help="batches per lake (40)")
    parser.add_argument("--new", type=int, default=10, help="new episodes per batch (10)")
    return parser.parse_args()


def before_0008(folder: Path) -> Path:
    """DuckLake's SQL files without migration 0008, with the views file of that release."""
    out = folder / "ducklake-before-0008"
    shutil.copytree(SQL_ROOT / "ducklake", out)
    (out / "0008_episode_flag_lists.sql").unlink()
    shutil.copy(BEFORE_VIEWS, out / "views.sql")
    return out


def text(values: dict[str, object], columns: list[str]) -> tuple[bytes | None, ...]:
    return tuple(text_value(values.get(c)) for c in columns)


def change_batch(lsn: int, new: int, bulk_id: str, flag: str) -> ChangeBatch:
    """``new`` new episodes with a flag each, and ``flag`` raised on a bulk episode."""
    episodes, flags = TextRows("episodes"), TextRows("episode_quality_flags")
    flag_columns = ["episode_id", "flag", "detail"]
    flag_layout = Layout.of("episode_quality_flags", flag_columns, ["episode_id", "flag"])
    seq = 0
    for _ in range(new):
        episode = {
            "id": str(uuid.uuid4()),
            "robot_id": "koi-01",
            "task_id": "pick_place_cube",
            "site": "lab",
            "operator": "op-ana",
            "started_at": "2026-12-07 00:00:00+00",
            "ended_at": "2026-12-07 00:00:02+00",
            "start_ns": lsn * 10**9,
            "end_ns": lsn * 10**9 + 2 * 10**9,
            "steps": 100,
            "control_hz": 50.0,
            "success": True,
            "uri": f"s3://bench/{uuid.uuid4()}.mcap",
            "size_bytes": 20_000,
            "sha256": "ab" * 32,
            "topics": "[]",
            "status": "active",
            "schema_version": 1,
            "pipeline_version": 1,
            "robot_sw_version": "1.0",
            "qc_report": "{}",
            "created_at": "2026-12-07 00:00:00+00",
            "updated_at": "2026-12-07 00:00:00+00",
        }
        seq += 1
        columns = list(episode)
        layout = Layout.of("episodes", columns, ["id"])
        episodes.upsert(layout, text(episode, columns), (lsn, seq))
        seq += 1
        raised = {"episode_id": episode["id"], "flag": "choppy_joints", "detail": "{}"}
        flags.upsert(flag_layout, text(raised, flag_columns), (lsn, seq))
    seq += 1
    later = {"episode_id": bulk_id, "flag": flag, "detail": "{}"}
    flags.upsert(flag_layout, text(later, flag_columns), (lsn, seq))
    position = Position(lsn=lsn + 8, snapshot_lsn=1, slot="bench", commit_lsn=lsn, tx_id=lsn)
    return ChangeBatch([episodes, flags], position)


def main() -> None:
    args = parse_args()
    episodes = args.episodes or (20_000 if args.small else 200_000)
    batches = args.batches or (12 if args.small else 40)
    root = Path(tempfile.mkdtemp(prefix="quarry-flag-lists-bench-"))
    paths = StatePaths.at(root / "state")
    paths.ensure()
    server = EmbeddedPostgres(paths)
    server.start()
    load = [os.getloadavg()[0]]
    lakes: dict[str, DuckLakeWarehouse] = {}
    try:
        for name, sql_dir in (("before", before_0008(root)), ("after", None)):
            server.ensure_database(f"catalog_{name}")
            config = DuckLakeConfig(
                catalog_dsn=SecretStr(server.dsn(f"catalog_{name}")), data_path=root / name
            )
            lake = DuckLakeWarehouse(config, sql_dir=sql_dir)
            lake.bootstrap()
            lake.close()
            bulk = Params(episodes=0, sql_rows=(episodes,), bulk_flag_rate=0.1)
            add_bulk_rows(config, bulk, "[]", 0, episodes, flag_lists=name == "after")
            lakes[name] = DuckLakeWarehouse(config, sql_dir=sql_dir)
        seconds: dict[str, list[float]] = {name: [] for name in lakes}
        for n in range(batches):
            lsn = 1_000 + 100 * n
            bulk_id = f"b0000000-0000-4000-8000-{n * 7 + 1:012x}"
            change = change_batch(lsn, args.new, bulk_id, "camera_blackout")
            for name in sorted(lakes, reverse=n % 2 == 1):
                started = time.perf_counter()
                lakes[name].apply(change)
                seconds[name].append(time.perf_counter() - started)
        load.append(os.getloadavg()[0])
        views = "SELECT id, quality_flags FROM episodes ORDER BY id"
        same = lakes["before"].query_arrow(views).equals(lakes["after"].query_arrow(views))
    finally:
        for lake in lakes.values():
            lake.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)

    def figures(values: list[float]) -> dict[str, float]:
        kept = sorted(values[2:])
        return {
            "median_ms": round(statistics.median(kept) * 1000, 1),
            "p90_ms": round(kept[int(0.9 * (len(kept) - 1))] * 1000, 1),
        }

    result = {
        "benchmark": "flag_lists",
        "params": {"episodes": episodes, "batches": batches, "new_per_batch": args.new},
        "before": figures(seconds["before"]),
        "after": figures(seconds["after"]),
        "same_view_rows": same,
        "machine": {"cpus": os.cpu_count(), "loadavg_1m_before_after": load},
    }
    result["upkeep_ratio"] = round(result["after"]["median_ms"] / result["before"]["median_ms"], 3)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
