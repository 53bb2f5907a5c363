"""Loader benchmark: manifest open by mmap against Parquet and JSON, shared pages across ranks,
the node cache against the remote path, and the data wait of a pinned training loop
(DESIGN.md, "Performance"; issue 7, item 7).

Manifests of synthetic rows (the 8 fixed columns, ~180 bytes a row) are written at each size
and opened in fresh processes: ``open_ms`` is the median time to get a usable handle (mmap:
``open_manifest``; Parquet: ``read_table`` of the same rows; JSON: ``json.load`` of
``json_rows`` rows), ``rss_mb_per_rank`` the process's RSS growth after opening and looking up
``lookups`` random samples. ``pss_mb_8_ranks`` sums the PSS growth (``/proc/<pid>/smaps_rollup``)
of 8 processes that map one manifest and touch every page, read while all of them hold it.
Real episode containers then go to moto's S3 server on loopback (the remote path: s3fs, one
ranged GET per 4 MiB block): ``cache_speedup`` is the read rate of cache hits over that of the
same objects streamed from S3, both through ``NodeCache.acquire(...).open()``. Finally a pinned
model trains on batches from ``ManifestIterableDataset`` in DataLoader workers, taken off the
workers' queue by ``BatchStream``'s thread while each step computes; after warm-up,
``data_wait_fraction`` is the time spent waiting for batches over the loop's time.
Prints one JSON line.

    python benchmarks/loader.py [--small]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

# This script is named like the package it measures: keep its own folder off the import path;
# its parts live in loader_bench/ (a folder, not a package: `make bench-small` runs *.py here).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE / "loader_bench"))

from episode_reads import measure_loader  # noqa: E402
from manifest_files import measure_open, measure_pss, probe_hold, probe_open  # noqa: E402
from pinned import FULL, SMALL, SPEC, Params  # noqa: E402


def note(section: str, figures: dict[str, Any]) -> dict[str, Any]:
    """Show a section's figures on stderr as it finishes (the JSON line comes at the end)."""
    print(f"{section}: {json.dumps(figures, default=str)}", file=sys.stderr, flush=True)
    return figures


def run(p: Params, folder: Path) -> dict[str, Any]:
    load_start = os.getloadavg()
    opened = note("open", measure_open(p, folder))
    mmap_ms = opened["open_ms"]["mmap"]
    largest_parquet = max(opened["open_ms"]["parquet"])
    json_ms = opened["open_ms"]["json"][p.json_rows]
    near_json = min(p.manifest_rows, key=lambda rows: abs(rows - p.json_rows))
    result: dict[str, Any] = {
        "benchmark": "loader",
        "params": {**asdict(p), "sample_spec": SPEC.to_dict(), "manifest_columns": 8},
        "manifest_rows": list(p.manifest_rows),
        **opened,
        "open_flat_ratio": mmap_ms[max(mmap_ms)] / mmap_ms[min(mmap_ms)],
        "open_speedup_vs_parquet": opened["open_ms"]["parquet"][largest_parquet]
        / mmap_ms[largest_parquet],
        "open_speedup_vs_json": json_ms / mmap_ms[near_json],
        **note("pss", measure_pss(p, folder)),
        **measure_loader(p, folder, note),
    }
    # How much faster the loader's workers make samples (one process's rate, times workers)
    # than the model consumes them: below 1, the loop must wait whatever the prefetching.
    result["loader_headroom"] = result["samples_per_s"] * p.workers / result["model_samples_per_s"]
    result["load_average"] = {  # 1, 5 and 15 minutes: the machine is shared
        "start": [round(v, 2) for v in load_start],
        "end": [round(v, 2) for v in os.getloadavg()],
    }
    result["targets_met"] = {
        "open_ms<50": max(mmap_ms.values()) < 50,
        "pss_copies<=1.1": result["pss_copies"] <= 1.1,
        "cache_speedup>=10": result["cache_speedup"] >= 10,
        "data_wait_fraction<0.01": result["data_wait_fraction"] < 0.01,
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI size: fewer rows and episodes")
    parser.add_argument("--probe", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp)")
    args = parser.parse_args()
    if args.probe:
        kind, *rest = args.probe
        if kind == "hold":
            probe_hold(rest[0])
        else:
            print(json.dumps(probe_open(rest[0], rest[1], int(rest[2]), int(rest[3]))))
        return
    folder = Path(tempfile.mkdtemp(prefix="quarry-loader-bench-", dir=args.dir))
    try:
        print(json.dumps(run(SMALL if args.small else FULL, folder), sort_keys=True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
