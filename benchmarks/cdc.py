"""CDC benchmark: initial snapshot throughput, then lag under a sustained write load.

Starts its own Postgres (pgserver wheel) and DuckLake warehouse in a temp folder, seeds the
source, runs the follower as a separate process (``python -m cdc follow``, as ``quarry up``
does), drives a paced write load with a pinned transaction shape, and checks the warehouse row
for row afterwards. Prints one JSON line, with the machine's load average (the figures depend
on what else runs) and the follower's CPU seconds.

    python benchmarks/cdc.py [--small] [--rate N] [--seconds S]
    python benchmarks/cdc.py --seconds 600 --query-every-s 10 --maintenance-s 30   # long run

With ``--query-every-s``, a reader in this process times a curation-style query over the
views every so often during the load (maintenance on), to show query time stays flat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cdc.status import read_status  # noqa: E402
from quarry.stack.migrations import apply_migrations  # noqa: E402
from quarry.stack.paths import StatePaths  # noqa: E402
from quarry.stack.postgres import EmbeddedPostgres  # noqa: E402
from warehouse.changes import parse_lsn  # noqa: E402
from warehouse.config import DuckLakeConfig  # noqa: E402
from warehouse.ducklake.backend import DuckLakeWarehouse  # noqa: E402

FULL = {"snapshot_episodes": 200_000, "rate": 5000, "seconds": 60}
SMALL = {"snapshot_episodes": 20_000, "rate": 1000, "seconds": 10}
SHAPE = {"rows_per_tx": 50, "update_fraction": 0.7, "seed": 5}
PEERDB_LAG_S = 10.0  # published: ~10 s of lag at 2,500 rows/s into ClickHouse
PROBE_SQL = (
    "SELECT robot_id, count(*) AS n, avg(steps) AS steps, sum(size_bytes) AS bytes "
    "FROM episodes WHERE success GROUP BY robot_id"
)

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
# One transaction of the pinned shape, as one statement (one round trip: the load generator
# must keep its pace on a busy machine).
_TRANSACTION = """
WITH inserted AS (
    INSERT INTO episodes (id, robot_id, task_id, site, operator, started_at, ended_at,
        start_ns, end_ns, steps, control_hz, success, uri, size_bytes, sha256, topics,
        schema_version, pipeline_version, robot_sw_version)
    SELECT u, 'r1', 't1', 'lab', 'op', now(), now(), 0, 60000000000, 600, 10.0, true,
        'objects/' || u || '.mcap', 1234, repeat('ab', 32), '[]', 1, 1, '1.0'
    FROM unnest(%s::uuid[]) AS u
    RETURNING 1
), updated AS (
    UPDATE episodes SET steps = steps + 1, updated_at = now() WHERE id = ANY(%s::uuid[])
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM updated)
"""


def start_stack(root: Path) -> tuple[EmbeddedPostgres, str, DuckLakeConfig]:
    paths = StatePaths.at(root)
    paths.ensure()
    server = EmbeddedPostgres(paths)
    server.start()
    server.ensure_database("quarry")
    server.ensure_database("quarry_catalog")
    apply_migrations(server.dsn("quarry"), ROOT / "sql" / "postgres")
    lake = DuckLakeConfig(
        catalog_dsn=SecretStr(server.dsn("quarry_catalog")), data_path=paths.warehouse
    )
    with DuckLakeWarehouse(lake) as warehouse:
        warehouse.bootstrap()
    return server, server.dsn("quarry"), lake


def start_follower(
    dsn: str, lake: DuckLakeConfig, root: Path, maintenance_s: float
) -> subprocess.Popen[bytes]:
    log = (root / "cdc.log").open("ab")
    assert lake.catalog_dsn is not None
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")},
        "QUARRY_SOURCE_DSN": dsn,
        "QUARRY_WAREHOUSE__CATALOG_DSN": lake.catalog_dsn.get_secret_value(),
        "QUARRY_WAREHOUSE__DATA_PATH": str(lake.data_path),
        "QUARRY_CDC__POLL_INTERVAL_S": "0.05",
        "QUARRY_CDC__MAINTENANCE_INTERVAL_S": str(maintenance_s),
    }
    command = [sys.executable, "-m", "cdc", "follow", "--status", str(root / "cdc.json")]
    command += ["--lag-log", str(root / "lags.jsonl")]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)


def wait_caught_up(
    dsn: str, lake: DuckLakeConfig, timeout_s: float, follower: subprocess.Popen[bytes]
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
    per_tx = int(SHAPE["rows_per_tx"])
    updates = round(per_tx * SHAPE["update_fraction"])
    interval = per_tx / rate
    done = changes = 0
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        while (now := time.monotonic()) - started < seconds:
            due = started + done * interval
            if now < due:
                time.sleep(due - now)
            new = [str(uuid.uuid4()) for _ in range(per_tx - updates)]
            conn.execute(_TRANSACTION, (new, rng.sample(ids, updates)))
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


class QueryProbe:
    """Times PROBE_SQL on a reader of its own every ``every_s`` seconds, in a thread."""

    def __init__(self, lake: DuckLakeConfig, every_s: float) -> None:
        self.samples: list[tuple[float, float]] = []  # (seconds into the load, query seconds)
        self._lake, self._every = lake, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        with DuckLakeWarehouse(self._lake) as warehouse:
            while not self._stop.wait(self._every):
                t0 = time.monotonic()
                warehouse.query_arrow(PROBE_SQL)
                self.samples.append((t0 - started, time.monotonic() - t0))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(120)
        times = [q for _, q in self.samples]
        if len(times) < 4:
            return {"query_samples": len(times)}
        quarter = max(1, len(times) // 4)
        first, last = float(np.median(times[:quarter])), float(np.median(times[-quarter:]))
        return {
            "query_samples": len(times),
            "query_first_quarter_median_s": round(first, 4),
            "query_last_quarter_median_s": round(last, 4),
            "query_last_vs_first": round(last / first, 2),
            "query_series_s": [[round(t, 1), round(q, 4)] for t, q in self.samples],
        }


def compare(dsn: str, lake: DuckLakeConfig) -> tuple[int, int]:
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


def batch_figures(root: Path) -> dict[str, Any]:
    """Lags per transaction and sizes/durations per batch, from the follower's lag log."""
    batches = [json.loads(line) for line in (root / "lags.jsonl").read_text().splitlines()]
    lags = np.array([lag for b in batches for lag in b["lags_s"]])
    changes = np.array([b["changes"] for b in batches])
    apply_s = np.array([b.get("apply_s", 0.0) for b in batches])
    return {
        "lags": lags,
        "batches": len(batches),
        "batch_changes_p50": int(np.percentile(changes, 50)),
        "batch_apply_p50_s": round(float(np.percentile(apply_s, 50)), 4),
        "batch_apply_p99_s": round(float(np.percentile(apply_s, 99)), 4),
    }


def report(
    params: dict[str, Any], load: dict[str, Any], figures: dict[str, Any], extra: dict[str, Any]
) -> dict[str, Any]:
    lags = figures.pop("lags")
    p99 = float(np.percentile(lags, 99))
    snapshot_rate = extra["snapshot_rows"] / extra["snapshot_s"]
    return {
        "benchmark": "cdc",
        "params": {**params, **SHAPE},
        "rate": round(load["achieved_rate"]),
        "lag_p50_s": round(float(np.percentile(lags, 50)), 4),
        "lag_p99_s": round(p99, 4),
        "lag_max_s": round(float(lags.max()), 4),
        "transactions": load["transactions"],
        "lagged_transactions": len(lags),
        "snapshot_rows_per_s": round(snapshot_rate),
        **figures,
        **{k: v for k, v in extra.items() if k != "snapshot_s"},
        "lag_p99_vs_peerdb": round(PEERDB_LAG_S / max(p99, 1e-6), 1),
        "targets_met": bool(
            p99 < 1.0
            and snapshot_rate >= 50_000
            and extra["rows_lost"] == 0
            and extra["rows_duplicated"] == 0
        ),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="CI size")
    parser.add_argument("--rate", type=int, help="row changes per second (default by size)")
    parser.add_argument("--seconds", type=float, help="length of the load (default by size)")
    parser.add_argument("--episodes", type=int, help="episodes seeded before the snapshot")
    parser.add_argument("--maintenance-s", type=float, default=300.0)
    parser.add_argument("--query-every-s", type=float, help="time a query this often")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    params = dict(SMALL if args.small else FULL)
    for key, value in (("rate", args.rate), ("seconds", args.seconds)):
        if value is not None:
            params[key] = value
    if args.episodes is not None:
        params["snapshot_episodes"] = args.episodes
    params["maintenance_s"] = args.maintenance_s
    root = Path(tempfile.mkdtemp(prefix="quarry-bench-cdc-"))
    server, dsn, lake = start_stack(root)
    try:
        print(json.dumps(measure(args, params, root, dsn, lake)))
    finally:
        server.stop()
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def measure(
    args: argparse.Namespace, params: dict[str, Any], root: Path, dsn: str, lake: DuckLakeConfig
) -> dict[str, Any]:
    """Seed, snapshot, load, catch up, compare; the benchmark's JSON document."""
    load_before = os.getloadavg()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_SEED_SQL.replace("%s", str(int(params["snapshot_episodes"]))))
        ids = [str(i) for (i,) in conn.execute("SELECT id FROM episodes")]
    follower = start_follower(dsn, lake, root, args.maintenance_s)
    try:
        wait_caught_up(dsn, lake, 600, follower)
        status = read_status(root / "cdc.json")
        while status is None or status.state != "streaming":  # written just after the commit
            time.sleep(0.05)
            status = read_status(root / "cdc.json")
        assert status.snapshot_rows and status.snapshot_s
        (root / "lags.jsonl").unlink(missing_ok=True)
        probe = QueryProbe(lake, args.query_every_s) if args.query_every_s else None
        cpu_before = psutil.Process(follower.pid).cpu_times()
        load = run_load(dsn, int(params["rate"]), float(params["seconds"]), ids)
        catch_up_s = wait_caught_up(dsn, lake, 300, follower)
        cpu_after = psutil.Process(follower.pid).cpu_times()
        probed = probe.stop() if probe is not None else {}
        follower.terminate()  # finishes (and logs) the batch in flight first
        follower.wait(60)
    finally:
        if follower.poll() is None:
            follower.kill()
    lost, duplicated = compare(dsn, lake)
    extra = {
        "catch_up_s": round(catch_up_s, 3),
        "snapshot_rows": status.snapshot_rows,
        "snapshot_s": status.snapshot_s,
        "rows_lost": lost,
        "rows_duplicated": duplicated,
        "follower_cpu_s": round(sum(cpu_after[:2]) - sum(cpu_before[:2]), 1),
        "cpus": os.cpu_count(),
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        **probed,
    }
    return report(params, load, batch_figures(root), extra)


if __name__ == "__main__":
    main()
