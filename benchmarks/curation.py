"""Curation benchmark: one warehouse query against a file-walking manifest builder, then the
query alone as the episode table grows to 43M rows (DESIGN.md, "Performance"; issue 6, item 9).

A real stack (``quarry up`` in a temp folder: Postgres, DuckLake, the CDC follower, the
service) and moto's S3 server (its own process, on loopback) hold ``episodes`` synthetic
episodes: small MCAP containers with a JSON sidecar each in S3, registered in Postgres by the
project's ingest code, mirrored by CDC. The same curation (``CURATION_SQL``, ~1% selective)
is then built twice at that size:

- ``walk_s``: the file-walking builder (``curation_bench/walker.py``): list, then per episode
  exists, sidecar, header, count (four requests to S3, counted at the server), then
  ``build_manifest``;
- ``sql_s``: ``POST /v1/curations`` on the service (median of ``sql_repeats`` builds).

Both manifests must hold the same rows. Bulk rows then grow the warehouse's episode table to
each of ``sql_rows`` (inserted straight into the DuckLake mirror tables from DuckDB's
``range()``: this measures curation, not CDC), and the same curation is timed at each size
(``sql_s_10k``, ``sql_s_100k``, ``rows_43m_s``). Prints one JSON line with the pinned
parameters, the sizes and the machine's load.

    python benchmarks/curation.py [--small] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import psycopg

# Scripts next to this one are named like the packages they measure (loader.py, cdc.py): keep
# this folder off the import path; the benchmark's parts live in curation_bench/ (a folder,
# not a package: `make bench-small` runs *.py here).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE / "curation_bench"))

from bulk_rows import add_bulk_rows  # noqa: E402
from fleet import build_fleet  # noqa: E402
from pinned import CURATION_SQL, FLEET, FULL, SMALL, SPEC, Params  # noqa: E402
from remote import moto_server, requests_logged, s3_filesystem, s3_store  # noqa: E402
from timing import curate, profile_curation, time_curations, wait_for_mirror  # noqa: E402
from walker import walk_curation  # noqa: E402

from manifests import open_manifest  # noqa: E402
from quarry.settings import Settings  # noqa: E402
from quarry.stack.lifecycle import Stack  # noqa: E402
from warehouse.base import Warehouse  # noqa: E402
from warehouse.ducklake.backend import DuckLakeWarehouse  # noqa: E402

COMPARED = ["episode_id", "uri", "start_ns", "end_ns", "num_samples", "sample_offset"]
COMPARED += ["size_bytes", "sha256", "robot_id", "task_id", "operator"]
NOTE = (
    "bulk rows are generated in DuckDB and inserted straight into the DuckLake mirror tables "
    "(episodes and quality flags, with _lsn/_seq/_deleted as CDC writes them): a benchmark "
    "of the curation path, not of CDC. DuckLake sorts each insert (4M rows) by robot, task and "
    "start time, as it sorts CDC batches and compactions (warehouse migration 0004). They "
    "carry no per-episode statistics rows (about 20 "
    "per episode), so the build's statistics aggregate reads the real episodes' only."
)


def note(section: str, figures: dict[str, Any]) -> dict[str, Any]:
    """Show a section's figures on stderr as it finishes (the JSON line comes at the end)."""
    print(f"{section}: {json.dumps(figures, default=str)}", file=sys.stderr, flush=True)
    return figures


@contextmanager
def running_stack(p: Params, folder: Path) -> Iterator[Stack]:
    """``quarry up`` in ``folder``; the daemons it spawns take these settings from the
    environment they inherit."""
    os.environ["QUARRY_CDC__MAINTENANCE_INTERVAL_S"] = str(p.cdc_maintenance_s)
    os.environ["QUARRY_CURATION__TIMEOUT_S"] = str(p.curation_timeout_s)
    stack = Stack(Settings(state_dir=folder / "state"))
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


def api_client(stack: Stack) -> httpx.Client:
    url = stack.status().service_url
    if url is None:
        raise RuntimeError("the service did not publish its URL")
    token = stack.paths.admin_token.read_text().strip()
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=900)


def measure_walk(endpoint: str, log: Path, out_dir: Path) -> dict[str, Any]:
    """The file-walking build, on a fresh s3fs client (no listing cache)."""
    fs = s3_filesystem(s3_store(endpoint))
    before = requests_logged(log)
    started = time.perf_counter()
    info, visited = walk_curation(fs, out_dir)
    seconds = time.perf_counter() - started
    time.sleep(0.5)  # let moto's log catch up with its last answers
    requests = requests_logged(log) - before
    return {
        "seconds": seconds,
        "visited": visited,
        "requests": requests,
        "requests_per_episode": round(requests / visited, 3),
        "rows": info.num_rows,
        "samples": info.num_samples,
        "path": str(info.path),
    }


def same_rows(walked: Path, served: Path) -> bool:
    """Whether both manifests hold the same slices, in the same order, with the same extras."""
    return bool(open_manifest(walked).table(COMPARED).equals(open_manifest(served).table(COMPARED)))


def time_sql(
    p: Params, lake: Warehouse, conn: psycopg.Connection[Any], api: httpx.Client, out: Path
) -> dict[str, Any]:
    """The curation timed over HTTP, then once more in-process for where its time goes."""
    timed = time_curations(api, lake, conn, p.sql_repeats)
    stride = SPEC.anchor_stride + p.sql_repeats
    timed["breakdown_s"] = profile_curation(lake, conn, out, stride, p.curation_timeout_s)
    wait_for_mirror(lake, conn, "manifest_episodes", -1)
    return timed


def measure_sizes(
    p: Params, stack: Stack, lake: Warehouse, conn: psycopg.Connection[Any], api: httpx.Client
) -> dict[int, dict[str, Any]]:
    """Grow the episode table to each of ``p.sql_rows`` and time the curation there."""
    row = conn.execute("SELECT topics::text FROM episodes LIMIT 1").fetchone()
    topics = str(row[0]) if row else "[]"
    have, sizes = p.episodes, {}
    for rows in p.sql_rows:
        insert_s = add_bulk_rows(
            stack.settings.warehouse_config(), p, topics, have - p.episodes, rows - p.episodes
        )
        have = rows
        wait_for_mirror(lake, conn, "episodes", rows)
        timed = time_sql(p, lake, conn, api, stack.paths.root / "profiled")
        warehouse_gb = sum(f.stat().st_size for f in stack.paths.warehouse.rglob("*.parquet"))
        sizes[rows] = note(
            f"sql at {rows} rows",
            {**timed, "insert_s": round(insert_s, 1), "warehouse_gb": round(warehouse_gb / 1e9, 3)},
        )
    return sizes


def measure(p: Params, folder: Path) -> dict[str, Any]:
    log = folder / "moto.log"
    with (
        moto_server(log) as endpoint,
        running_stack(p, folder) as stack,
        psycopg.connect(stack.settings.operational_dsn(), autocommit=True) as conn,
        DuckLakeWarehouse(stack.settings.warehouse_config()) as lake,
        api_client(stack) as api,
    ):
        fs = s3_filesystem(s3_store(endpoint), create_bucket=True)
        fleet = note("fleet", asdict(build_fleet(p, fs, conn)))
        fleet["cdc_wait_s"] = round(wait_for_mirror(lake, conn, "episodes", p.episodes), 1)
        curate(api, 1, "SELECT id FROM episodes LIMIT 1")  # opens the service's reader
        walk = note("walk", measure_walk(endpoint, log, folder / "walk"))
        sql = note("sql", time_sql(p, lake, conn, api, stack.paths.root / "profiled"))
        served = stack.paths.manifests / f"{sql['manifest_id']}.arrow"
        same = same_rows(Path(walk.pop("path")), served)
        sizes = measure_sizes(p, stack, lake, conn, api)
    return {"fleet": fleet, "walk": walk, "sql": sql, "same_rows": same, "sizes": sizes}


def report(p: Params, figures: dict[str, Any], load: tuple[float, float]) -> dict[str, Any]:
    sizes = figures["sizes"]
    walk_s, sql_s = figures["walk"]["seconds"], figures["sql"]["seconds"]
    at_10k, at_100k = sizes[10_000]["seconds"], sizes[100_000]["seconds"]
    bulk_s = sizes[p.bulk_rows]["seconds"]
    fleet = {k: v for k, v in asdict(FLEET).items() if k != "robots"}
    result = {
        "benchmark": "curation",
        "walk_s": round(walk_s, 3),
        "sql_s": round(sql_s, 4),
        "ratio": round(walk_s / sql_s, 1),
        "sql_s_10k": round(at_10k, 4),
        "sql_s_100k": round(at_100k, 4),
        "sql_100k_over_10k": round(at_100k / at_10k, 3),
        "rows_43m_s": round(bulk_s, 3) if p.bulk_rows == 43_000_000 else None,
        "rows_bulk": p.bulk_rows,
        "rows_bulk_s": round(bulk_s, 3),
        "params": {**asdict(p), "curation_sql": CURATION_SQL, "sample_spec": SPEC.to_dict()},
        "fleet_params": fleet,
        "bulk_note": NOTE,
        **{k: figures[k] for k in ("fleet", "walk", "sql", "same_rows", "sizes")},
        "machine": {"cpus": os.cpu_count(), "loadavg_1m_before_after": list(load)},
    }
    result["targets_met"] = {
        "ratio>=100": result["ratio"] >= 100,
        "sql_s_100k<=2*sql_s_10k": at_100k <= 2 * at_10k,
        "rows_43m_s<5": None if result["rows_43m_s"] is None else bulk_s < 5,
        "same_rows": figures["same_rows"],
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI size: 400 episodes, 1M rows")
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp)")
    args = parser.parse_args()
    p = SMALL if args.small else FULL
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="quarry-curation-bench-", dir=args.dir))
    try:
        before = os.getloadavg()[0]
        figures = measure(p, folder)
        load = (round(before, 2), round(os.getloadavg()[0], 2))
        print(json.dumps(report(p, figures, load), sort_keys=True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
