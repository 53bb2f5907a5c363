"""CDC benchmark: initial snapshot throughput, then lag under a sustained write load.

Starts its own Postgres (pgserver wheel) and DuckLake warehouse in a temp folder, seeds the
source, runs the follower as a separate process (``python -m cdc follow``, as ``quarry up``
does), drives a paced write load with a pinned transaction shape, and checks the warehouse row
for row afterwards. Prints one JSON line.

    python benchmarks/cdc.py [--small]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cdc.status import read_status  # noqa: E402
from service.migrations import apply_migrations  # noqa: E402
from service.paths import StatePaths  # noqa: E402
from service.postgres import EmbeddedPostgres  # noqa: E402
from warehouse.changes import parse_lsn  # noqa: E402
from warehouse.config import WarehouseConfig  # noqa: E402
from warehouse.ducklake import DuckLakeWarehouse  # noqa: E402

FULL = {"snapshot_episodes": 200_000, "rate": 5000, "seconds": 60}
SMALL = {"snapshot_episodes": 20_000, "rate": 1000, "seconds": 10}
SHAPE = {"rows_per_tx": 50, "update_fraction": 0.7, "seed": 5}
PEERDB_LAG_S = 10.0  # published: ~10 s of lag at 2,500 rows/s into ClickHouse

_SEED_SQL = """
INSERT INTO robots (id, model, site) VALUES ('r1', 'arm', 'lab');
INSERT INTO tasks (id, description) VALUES ('t1', 'pick');
INSERT INTO episodes (id, robot_id, task_id, site, operator, started_at, ended_at, start_ns,
    end_ns, steps, control_hz, success, uri, size_bytes, sha256, topics, schema_version,
    pipeline_version, robot_sw_version)
SELECT gen_random_uuid(), 'r1', 't1', 'lab', 'op', now(), now(), 0, 60000000000, 600, 10.0,
    g % 3 = 0, 'objects/' || g || '.mcap', 1000 + g, md5(g::text) || md5(g::text),
    '[{"topic": "/cam", "rate_hz": 30}]', 1, 1, '1.0'
FROM generate_series(1, %s) AS g;
INSERT INTO episode_stats (episode_id, field, dim, count, sum, sum_sq, min, max)
SELECT id, 'state', 0, 600, 1.0, 2.0, -1.0, 1.0 FROM episodes;
"""
_INSERT = """
INSERT INTO episodes (id, robot_id, task_id, site, operator, started_at, ended_at, start_ns,
    end_ns, steps, control_hz, success, uri, size_bytes, sha256, topics, schema_version,
    pipeline_version, robot_sw_version)
SELECT u, 'r1', 't1', 'lab', 'op', now(), now(), 0, 60000000000, 600, 10.0, true,
    'objects/' || u || '.mcap', 1234, repeat('ab', 32), '[]', 1, 1, '1.0'
FROM unnest(%s::uuid[]) AS u
"""
_UPDATE = "UPDATE episodes SET steps = steps + 1, updated_at = now() WHERE id = ANY(%s::uuid[])"


def start_stack(root: Path) -> tuple[EmbeddedPostgres, str, WarehouseConfig]:
    paths = StatePaths.at(root)
    paths.ensure()
    server = EmbeddedPostgres(paths)
    server.start()
    server.ensure_database("quarry")
    server.ensure_database("quarry_catalog")
    apply_migrations(server.dsn("quarry"), ROOT / "sql" / "postgres")
    lake = WarehouseConfig(
        catalog_dsn=SecretStr(server.dsn("quarry_catalog")), data_path=paths.warehouse
    )
    with DuckLakeWarehouse(lake) as warehouse:
        warehouse.bootstrap()
    return server, server.dsn("quarry"), lake


def start_follower(dsn: str, lake: WarehouseConfig, root: Path) -> subprocess.Popen[bytes]:
    log = (root / "cdc.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cdc",
            "follow",
            "--source-dsn",
            dsn,
            "--catalog-dsn",
            lake.catalog_dsn.get_secret_value(),
            "--data-path",
            str(lake.data_path),
            "--status",
            str(root / "cdc.json"),
            "--lag-log",
            str(root / "lags.jsonl"),
            "--poll-interval-s",
            "0.05",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )


def wait_caught_up(
    dsn: str, lake: WarehouseConfig, timeout_s: float, follower: subprocess.Popen[bytes]
) -> float:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    target = parse_lsn(row[0])
    started = time.monotonic()
    with DuckLakeWarehouse(lake) as warehouse:
        while time.monotonic() - started < timeout_s:
            if follower.poll() is not None:
                raise RuntimeError(f"the follower exited with {follower.returncode}")
            position = warehouse.position()
            if position is not None and position.lsn >= target:
                return time.monotonic() - started
            time.sleep(0.05)
    raise TimeoutError(f"warehouse did not catch up within {timeout_s} s")


def run_load(dsn: str, rate: int, seconds: float, ids: list[str]) -> dict[str, Any]:
    """Paced transactions of SHAPE['rows_per_tx'] rows until ``seconds`` have passed."""
    rng = random.Random(SHAPE["seed"])
    per_tx = SHAPE["rows_per_tx"]
    updates = round(per_tx * SHAPE["update_fraction"])
    interval = per_tx / rate
    done = changes = 0
    started = time.monotonic()
    with psycopg.connect(dsn) as conn:
        while (now := time.monotonic()) - started < seconds:
            due = started + done * interval
            if now < due:
                time.sleep(due - now)
            new = [str(uuid.uuid4()) for _ in range(per_tx - updates)]
            with conn.transaction():
                conn.execute(_INSERT, (new,))
                conn.execute(_UPDATE, (rng.sample(ids, updates),))
            ids.extend(new)
            done += 1
            changes += per_tx
    elapsed = time.monotonic() - started
    return {
        "transactions": done,
        "changes": changes,
        "seconds": elapsed,
        "achieved_rate": changes / elapsed,
    }


def compare(dsn: str, lake: WarehouseConfig) -> tuple[int, int]:
    """(rows lost, rows duplicated) between Postgres and the warehouse, by (id, steps)."""
    with psycopg.connect(dsn) as conn:
        source = {(str(i), s) for i, s in conn.execute("SELECT id, steps FROM episodes")}
    with DuckLakeWarehouse(lake) as warehouse:
        mirror = warehouse.query_arrow(
            "SELECT CAST(id AS VARCHAR) AS id, steps FROM mirror.episodes WHERE NOT _deleted"
        )
        keys = mirror.column("id").to_pylist()
        rows = set(zip(keys, mirror.column("steps").to_pylist(), strict=True))
    lost = len(source - rows)
    duplicated = (len(keys) - len(set(keys))) + len(rows - source)
    return lost, duplicated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="CI size")
    params = SMALL if parser.parse_args().small else FULL
    root = Path(tempfile.mkdtemp(prefix="quarry-bench-cdc-"))
    server, dsn, lake = start_stack(root)
    follower = None
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_SEED_SQL.replace("%s", str(int(params["snapshot_episodes"]))))
            ids = [str(i) for (i,) in conn.execute("SELECT id FROM episodes")]
        follower = start_follower(dsn, lake, root)
        wait_caught_up(dsn, lake, 600, follower)
        status = read_status(root / "cdc.json")
        while status is None or status.state != "streaming":  # written just after the commit
            time.sleep(0.05)
            status = read_status(root / "cdc.json")
        assert status.snapshot_rows and status.snapshot_s
        (root / "lags.jsonl").unlink(missing_ok=True)
        load = run_load(dsn, int(params["rate"]), float(params["seconds"]), ids)
        catch_up_s = wait_caught_up(dsn, lake, 300, follower)
        follower.terminate()  # finishes (and logs) the batch in flight first
        follower.wait(60)
        lags = np.array(
            [
                lag
                for line in (root / "lags.jsonl").read_text().splitlines()
                for lag in json.loads(line)["lags_s"]
            ]
        )
        lost, duplicated = compare(dsn, lake)
        p99 = float(np.percentile(lags, 99))
        print(
            json.dumps(
                {
                    "benchmark": "cdc",
                    "params": {**params, **SHAPE},
                    "rate": round(load["achieved_rate"]),
                    "lag_p50_s": round(float(np.percentile(lags, 50)), 4),
                    "lag_p99_s": round(p99, 4),
                    "lag_max_s": round(float(lags.max()), 4),
                    "catch_up_s": round(catch_up_s, 3),
                    "transactions": load["transactions"],
                    "lagged_transactions": len(lags),
                    "snapshot_rows": status.snapshot_rows,
                    "snapshot_rows_per_s": round(status.snapshot_rows / status.snapshot_s),
                    "rows_lost": lost,
                    "rows_duplicated": duplicated,
                    "lag_p99_vs_peerdb": round(PEERDB_LAG_S / max(p99, 1e-6), 1),
                    "targets_met": bool(
                        p99 < 1.0
                        and status.snapshot_rows / status.snapshot_s >= 50_000
                        and lost == 0
                        and duplicated == 0
                    ),
                }
            )
        )
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
