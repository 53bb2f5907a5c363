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
(``sql_s_10k``, ``sql_s_100k``, ``rows_43m_s``), with the service's peak memory (its
``VmHWM``) after each size. Each size's ``registration`` (and ``registration_bulk``, the
largest size's) puts this release's lineage registration beside the one before it, on the
same lineage: ``new_s`` (the registry transaction, with ``new_lineage_s``, the lineage's one
file in the warehouse) and ``old_s`` (one row per episode COPYed into a Postgres table shaped
like the old ``manifest_episodes``, as the release before 0007 did; its CDC traffic is not
replayed), and the WAL bytes of each. Prints one JSON line with the pinned parameters, the
sizes and the machine's load.

``--backend clickhouse`` also copies the DuckLake mirror's rows, at every size, into a chDB
warehouse in this process (``curation_bench/house.py``) and builds the same curation there
through the service's ``run_curation``, once the copy's background merges have ended
(``settle_s``); the JSON line's figures are then ClickHouse's, DuckLake's of the same run are
under ``ducklake`` (and each size's ``sizes`` section), ``targets_met`` holds both backends'
43M targets, and ``same_rows_as_ducklake`` compares the two backends' manifests. Every line
also carries ``cdc_catch_up_s_by_rows`` (after each size's profiled registration, the seconds
until the warehouse holds its registry row) and ``service_peak_mb_by_rows``.

    python benchmarks/curation.py [--small] [--backend ducklake|clickhouse]
                                  [--sql-rows 10000,100000,1000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
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
from house import House, bulk_range, time_house  # noqa: E402
from pinned import CURATION_SQL, FLEET, FULL, SMALL, SPEC, Params  # noqa: E402
from remote import moto_server, requests_logged, s3_filesystem, s3_store  # noqa: E402
from timing import curate, profile_curation, time_curations, wait_for_mirror  # noqa: E402
from walker import walk_curation  # noqa: E402

from manifests import open_manifest  # noqa: E402
from quarry.settings import Settings  # noqa: E402
from quarry.stack.lifecycle import Stack  # noqa: E402
from warehouse.base import Warehouse  # noqa: E402
from warehouse.config import DuckLakeConfig  # noqa: E402
from warehouse.ducklake.backend import DuckLakeWarehouse  # noqa: E402
from warehouse.ducklake.connection import attach_lake, new_database  # noqa: E402

COMPARED = ["episode_id", "uri", "start_ns", "end_ns", "num_samples", "sample_offset"]
COMPARED += ["size_bytes", "sha256", "robot_id", "task_id", "operator"]
# Across backends the builds use other anchor strides (a spec one backend built would be
# reused): the same episodes, in the same order, with the same extras.
HOUSE_COMPARED = [c for c in COMPARED if c not in ("num_samples", "sample_offset")]
HOUSE_MEMORY = "8GB"  # the chDB reader's per-query memory cap
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


def same_rows(walked: Path, served: Path, columns: list[str] = COMPARED) -> bool:
    """Whether both manifests hold the same slices, in the same order, with the same extras."""
    return bool(open_manifest(walked).table(columns).equals(open_manifest(served).table(columns)))


def time_sql(
    p: Params, lake: Warehouse, conn: psycopg.Connection[Any], api: httpx.Client, out: Path
) -> dict[str, Any]:
    """The curation timed over HTTP, then once more in-process for where its time goes."""
    timed = time_curations(api, lake, conn, p.sql_repeats)
    stride = SPEC.anchor_stride + p.sql_repeats
    timed["breakdown_s"] = profile_curation(lake, conn, out, stride, p.curation_timeout_s)
    # The CDC lag right after a large registration: seconds until the warehouse holds the
    # registry row just written (polled every 0.2 s; the lineage itself no longer passes
    # through CDC, and the old per-episode rows' WAL is under ``registration``).
    timed["cdc_catch_up_s"] = round(wait_for_mirror(lake, conn, "manifests", -1), 2)
    timed["registration"] = timed["breakdown_s"].pop("registration")
    return timed


def peak_memory_mb(stack: Stack) -> float | None:
    """The service's peak resident memory so far (its ``VmHWM``, MB; Linux only)."""
    pid = stack.status().parts["service"].detail.get("pid")
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    peak = [line.split()[1] for line in lines if line.startswith("VmHWM:")]
    return round(int(peak[0]) / 1024, 1) if peak else None


def own_peak_memory_mb() -> float:
    """This process's peak resident memory so far (MB): chDB's builds run in it."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def time_house_at(
    p: Params, house: House, conn: psycopg.Connection[Any], out: Path, lake_manifest: Path
) -> dict[str, Any]:
    """The curation on ClickHouse, its manifest's episodes against DuckLake's."""
    stride = SPEC.anchor_stride + 2 * p.sql_repeats + 1  # never a spec DuckLake built
    timed = time_house(house, conn, out, stride, p.sql_repeats)
    built = Path(timed["breakdown_s"].pop("manifest"))
    timed["same_rows_as_ducklake"] = same_rows(lake_manifest, built, HOUSE_COMPARED)
    timed["process_peak_mb"] = own_peak_memory_mb()
    return timed


def copy_and_time(
    p: Params,
    house: House,
    lake: Warehouse,
    conn: psycopg.Connection[Any],
    stack: Stack,
    lake_manifest: Path,
    where: dict[str, str] | None,
) -> dict[str, Any]:
    """Copy the lake's new rows (``where``; all of them for ``None``) into ClickHouse, wait
    for the copy's background merges to end (``settle_s``), then time the curation there."""
    started = time.perf_counter()
    copied = house.copy(lake_position(lake), where)
    copy_s = round(time.perf_counter() - started, 1)
    settle_s = round(house.settle(), 1)
    timed = time_house_at(p, house, conn, stack.paths.root / "house", lake_manifest)
    return {**timed, "copy_s": copy_s, "settle_s": settle_s, "copied_rows": copied}


def measure_sizes(
    p: Params,
    stack: Stack,
    lake: Warehouse,
    conn: psycopg.Connection[Any],
    api: httpx.Client,
    house: House | None,
) -> dict[int, dict[str, Any]]:
    """Grow the episode table to each of ``p.sql_rows`` and time the curation there."""
    row = conn.execute("SELECT topics::text FROM episodes LIMIT 1").fetchone()
    topics = str(row[0]) if row else "[]"
    have, sizes = p.episodes, {}
    for rows in p.sql_rows:
        start, stop = have - p.episodes, rows - p.episodes
        insert_s = add_bulk_rows(stack.settings.warehouse_config(), p, topics, start, stop)
        have = rows
        wait_for_mirror(lake, conn, "episodes", rows)
        timed = time_sql(p, lake, conn, api, stack.paths.root / "profiled")
        warehouse_gb = sum(f.stat().st_size for f in stack.paths.warehouse.rglob("*.parquet"))
        figures = {
            **timed,
            "insert_s": round(insert_s, 1),
            "warehouse_gb": round(warehouse_gb / 1e9, 3),
        }
        figures["service_peak_mb"] = peak_memory_mb(stack)
        if house is not None:
            served = stack.paths.manifests / f"{timed['manifest_id']}.arrow"
            where = bulk_range(start, stop)
            figures["clickhouse"] = copy_and_time(p, house, lake, conn, stack, served, where)
        sizes[rows] = note(f"sql at {rows} rows", figures)
    config = stack.settings.warehouse_config()
    manifest_sql = sizes[p.bulk_rows]["breakdown_s"].get("sql")
    if isinstance(config, DuckLakeConfig) and manifest_sql:
        plan = explain_manifest_query(config, manifest_sql)
        print(f"manifest query at {p.bulk_rows} rows:\n{manifest_sql}\n{plan}", file=sys.stderr)
    for figures in sizes.values():
        figures["breakdown_s"].pop("sql", None)
        figures.get("clickhouse", {}).get("breakdown_s", {}).pop("sql", None)
    return sizes


def explain_manifest_query(config: DuckLakeConfig, sql: str) -> str:
    """``EXPLAIN ANALYZE`` of a build's manifest query on a fresh read-only DuckLake
    connection (two threads, as the service's reader): where its time goes."""
    con = new_database(threads=2)
    try:
        attach_lake(con, config, read_only=True)
        rows = con.execute(f"EXPLAIN ANALYZE {sql}").fetchall()
    finally:
        con.close()
    return "\n".join(str(row[-1]) for row in rows)


def lake_position(lake: Warehouse) -> str | None:
    position = lake.position()
    return None if position is None else position.to_json()


def measure(p: Params, folder: Path, backend: str) -> dict[str, Any]:
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
        lake.lineage_manifests()  # opens this process's lineage writer, as the service's is
        walk = note("walk", measure_walk(endpoint, log, folder / "walk"))
        sql = note("sql", time_sql(p, lake, conn, api, stack.paths.root / "profiled"))
        served = stack.paths.manifests / f"{sql['manifest_id']}.arrow"
        same = same_rows(Path(walk.pop("path")), served)
        sql["breakdown_s"].pop("sql", None)
        house = None
        if backend == "clickhouse":
            lake_config = stack.settings.warehouse_config()
            assert isinstance(lake_config, DuckLakeConfig)
            house = House(folder, lake_config, HOUSE_MEMORY)
            sql["clickhouse"] = copy_and_time(p, house, lake, conn, stack, served, None)
            sql["clickhouse"]["breakdown_s"].pop("sql", None)
            note("clickhouse", sql["clickhouse"])
        try:
            sizes = measure_sizes(p, stack, lake, conn, api, house)
        finally:
            if house is not None:
                house.close()
    return {"fleet": fleet, "walk": walk, "sql": sql, "same_rows": same, "sizes": sizes}


def headline(figures: dict[str, Any], backend: str) -> dict[str, Any]:
    """The timed figures of ``backend``: ``sql`` and each size's (ClickHouse's sit in each
    DuckLake section, under ``clickhouse``)."""
    if backend == "ducklake":
        return {"sql": figures["sql"], "sizes": figures["sizes"]}
    return {
        "sql": figures["sql"]["clickhouse"],
        "sizes": {rows: size["clickhouse"] for rows, size in figures["sizes"].items()},
    }


def report(
    p: Params, figures: dict[str, Any], load: tuple[float, float], backend: str
) -> dict[str, Any]:
    timed = headline(figures, backend)
    sizes = timed["sizes"]
    walk_s, sql_s = figures["walk"]["seconds"], timed["sql"]["seconds"]
    at_10k, at_100k = sizes[10_000]["seconds"], sizes[100_000]["seconds"]
    bulk_s = sizes[p.bulk_rows]["seconds"]
    fleet = {k: v for k, v in asdict(FLEET).items() if k != "robots"}
    result = {
        "benchmark": "curation",
        "backend": backend,
        "walk_s": round(walk_s, 3),
        "sql_s": round(sql_s, 4),
        "ratio": round(walk_s / sql_s, 1),
        "sql_s_10k": round(at_10k, 4),
        "sql_s_100k": round(at_100k, 4),
        "sql_100k_over_10k": round(at_100k / at_10k, 3),
        "rows_43m_s": round(bulk_s, 3) if p.bulk_rows == 43_000_000 else None,
        "rows_bulk": p.bulk_rows,
        "rows_bulk_s": round(bulk_s, 3),
        "seconds_by_rows": {rows: round(size["seconds"], 4) for rows, size in sizes.items()},
        # the lineage registration at the bulk size: this release's (warehouse file, then the
        # registry row) beside the one before it (a Postgres row per episode), same lineage
        "registration_bulk": sizes[p.bulk_rows].get("registration"),
        "params": {**asdict(p), "curation_sql": CURATION_SQL, "sample_spec": SPEC.to_dict()},
        "fleet_params": fleet,
        "bulk_note": NOTE,
        **{k: figures[k] for k in ("fleet", "walk", "sql", "same_rows", "sizes")},
        "machine": {"cpus": os.cpu_count(), "loadavg_1m_before_after": list(load)},
        # the stack's service (DuckLake's curations, over HTTP) at each size: its VmHWM
        "cdc_catch_up_s_by_rows": {
            rows: size.get("cdc_catch_up_s") for rows, size in figures["sizes"].items()
        },
        "service_peak_mb_by_rows": {
            rows: size["service_peak_mb"] for rows, size in figures["sizes"].items()
        },
    }
    target_43m = 2.0 if backend == "ducklake" else 4.0
    result["targets_met"] = {
        "ratio>=100": result["ratio"] >= 100,
        "sql_s_100k<=2*sql_s_10k": at_100k <= 2 * at_10k,
        "rows_43m_s<5": None if result["rows_43m_s"] is None else bulk_s < 5,
        f"rows_43m_s<{target_43m:g}": None if result["rows_43m_s"] is None else bulk_s < target_43m,
        "same_rows": figures["same_rows"],
    }
    if backend == "clickhouse":
        same = [timed["sql"]["same_rows_as_ducklake"]]
        same += [size["same_rows_as_ducklake"] for size in sizes.values()]
        result["targets_met"]["same_rows_as_ducklake"] = all(same)
        # DuckLake's figures of the same run, so one line shows both backends' targets
        lake = figures["sizes"]
        lake_bulk_s = lake[p.bulk_rows]["seconds"]
        result["ducklake"] = {
            "rows_43m_s": round(lake_bulk_s, 3) if p.bulk_rows == 43_000_000 else None,
            "seconds_by_rows": {rows: round(size["seconds"], 4) for rows, size in lake.items()},
        }
        result["process_peak_mb_by_rows"] = {
            rows: size["process_peak_mb"] for rows, size in sizes.items()
        }
        if p.bulk_rows == 43_000_000:
            result["targets_met"]["ducklake_rows_43m_s<2"] = lake_bulk_s < 2.0
    return result


def sql_rows(text: str) -> tuple[int, ...]:
    """``--sql-rows``: comma-separated sizes, 10000 and 100000 among them (the ratio)."""
    sizes = tuple(sorted({int(part) for part in text.split(",")}))
    if not {10_000, 100_000} <= set(sizes):
        raise argparse.ArgumentTypeError("the sizes must include 10000 and 100000")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI size: 400 episodes, 1M rows")
    parser.add_argument("--backend", choices=("ducklake", "clickhouse"), default="ducklake")
    parser.add_argument(
        "--sql-rows",
        type=sql_rows,
        default=None,
        help="episode-table sizes, e.g. 10000,100000,1000000",
    )
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp)")
    args = parser.parse_args()
    p = SMALL if args.small else FULL
    if args.sql_rows is not None:
        p = replace(p, sql_rows=args.sql_rows)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="quarry-curation-bench-", dir=args.dir))
    try:
        before = os.getloadavg()[0]
        figures = measure(p, folder, args.backend)
        load = (round(before, 2), round(os.getloadavg()[0], 2))
        print(json.dumps(report(p, figures, load, args.backend), sort_keys=True, default=str))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
