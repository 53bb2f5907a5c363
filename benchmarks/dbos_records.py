"""What DBOS's records cost a recording's workflow, by worker connection settings.

The ingest pipeline's durable cost is fixed per recording: a child workflow (its start, its
inputs, its outcome) and two transactions per step (look for a recorded output, record this
one). This benchmark runs a batch workflow of child workflows of eight steps that do
nothing but return a container-sized dict (the shape of ``pipeline.workflow``), against its
own Postgres (pgserver wheel), each configuration in its own process pinned to one core,
taking turns round by round:

- ``dbos_defaults``: DBOS's engine (a ping before each pool checkout, synchronous commits)
  and its notifier's default 0.01 s;
- ``no_ping``: Quarry's worker settings with ``pipeline.synchronous_step_records = true``;
- ``quarry``: Quarry's worker settings (``pipeline.engine.engine_options``, no ping,
  ``synchronous_commit = off`` on the worker's connections; docs/pipeline.md).

Prints one JSON line: per configuration, the median over rounds of the milliseconds of wall
clock and of CPU (the process, all threads) per recording's workflow.

    python benchmarks/dbos_records.py [--small] [--rounds N] [--recordings N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = ("dbos_defaults", "no_ping", "quarry")
STEPS = 8


def child_process(dsn: str, config: str, recordings: int) -> dict[str, float]:
    """Run in the measured process: launch DBOS with ``config``, one warm-up batch, then
    one timed batch of ``recordings`` child workflows."""
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    from pipeline.engine import SYSTEM_SCHEMA, engine_options, system_url
    from pipeline.worker import NOTIFY_COALESCE_S

    @DBOS.step(name="step")
    def step(data: dict[str, Any]) -> dict[str, Any]:
        return {"uri": "file:///objects/episodes/r/e/0123456789abcdef.mcap", **data}

    @DBOS.workflow(name="recording")
    def recording(data: dict[str, Any]) -> dict[str, Any]:
        out = data
        for _ in range(STEPS):
            out = step(out)
        return out

    @DBOS.workflow(name="batch")
    def batch(prefix: str, n: int) -> int:
        for i in range(n):
            with SetWorkflowID(f"{prefix}:{i}"):
                recording({"sha256": "0" * 64, "size_bytes": 1 << 20, "i": i})
        return n

    settings: DBOSConfig = {
        "name": "quarry-bench",
        "system_database_url": system_url(dsn),
        "dbos_system_schema": SYSTEM_SCHEMA,
    }
    if config != "dbos_defaults":
        settings["notification_coalesce_sec"] = NOTIFY_COALESCE_S
        settings["db_engine_kwargs"] = engine_options(dsn, synchronous=config == "no_ping")
    DBOS(config=settings)
    DBOS.launch()
    try:
        tag = f"{config}-{time.time_ns()}"
        batch(f"warm-{tag}", 3)
        cpu, wall = time.process_time(), time.perf_counter()
        batch(f"run-{tag}", recordings)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        DBOS.destroy()
    return {"wall_ms": 1000 * wall / recordings, "cpu_ms": 1000 * cpu / recordings}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a quick run (under a minute)")
    parser.add_argument("--rounds", type=int, help="rounds (default 5, --small 2)")
    parser.add_argument("--recordings", type=int, help="workflows per batch (default 60)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.child:
        dsn, config, n = args.child
        print(json.dumps(child_process(dsn, config, int(n))))
        return
    from pipeline.engine import migrate_system
    from quarry.stack.paths import StatePaths
    from quarry.stack.postgres import EmbeddedPostgres

    rounds = args.rounds or (2 if args.small else 5)
    recordings = args.recordings or (30 if args.small else 60)
    root = Path(tempfile.mkdtemp(prefix="quarry-dbos-bench-"))
    paths = StatePaths.at(root / "state")
    paths.ensure()
    server = EmbeddedPostgres(paths)
    server.start()
    results: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
    try:
        server.ensure_database("quarry")
        dsn = server.dsn("quarry")
        migrate_system(dsn)
        core = str(sorted(os.sched_getaffinity(0))[0])
        for _ in range(rounds):
            for config in CONFIGS:
                command = [sys.executable, __file__, "--child", dsn, config, str(recordings)]
                done = subprocess.run(
                    ["taskset", "-c", core, *command],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    raise SystemExit(f"{config} failed: {done.stderr[-2000:]}")
                results[config].append(json.loads(done.stdout.splitlines()[-1]))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)

    def median(config: str, key: str) -> float:
        return round(statistics.median(r[key] for r in results[config]), 1)

    line = {
        "benchmark": "dbos_records",
        "small": args.small,
        "params": {"steps_per_recording": STEPS, "recordings": recordings, "rounds": rounds},
        "ms_per_recording": {
            c: {"wall": median(c, "wall_ms"), "cpu": median(c, "cpu_ms")} for c in CONFIGS
        },
        "quarry_vs_dbos_defaults_wall": round(
            median("quarry", "wall_ms") / median("dbos_defaults", "wall_ms"), 3
        ),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
