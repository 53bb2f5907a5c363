"""Trainer benchmark: goodput through one injected rank failure; sync vs async checkpoint stall.

On a synthetic corpus generated here (pinned parameters, written into the JSON), with a pinned
model and batch, two ranks (torchrun, gloo, CPU) train through :func:`trainer.launch.launch_run`
exactly as ``quarry train`` does:

1. two short runs without faults, checkpointing every few steps, one with synchronous and one
   with asynchronous saves: ``checkpoint_stall_s`` is the mean time a save blocks training;
   the first also measures the step time and the time a (re)start takes;
2. the main run, asynchronous saves on the Young/Daly interval with the MTBF set to the run's
   planned length (one failure expected), planned at 25x the estimated restart time (full
   size; the issue asks for at least 20x, the JSON reports the ratio achieved), with rank 1
   killed (SIGKILL) 60% of the way through; torchrun restarts the workers, which resume from
   the latest complete checkpoint.

The machine's load average (1, 5 and 15 minutes, at the start and at the end) is reported: on
a shared machine other processes take CPU from the ranks and their DataLoader workers.

Prints one JSON line: ``goodput_fraction`` (compute over wall time since the run started, the
failure included), ``checkpoint_stall_s`` for sync and async, ``recovery_s`` (failure to the
end of the first step after the restart), ``lost_work_s`` (work since the resumed checkpoint)
against ``checkpoint_interval_s``, and the targets of issue 8.

    python benchmarks/trainer.py [--small] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# This script is named like the package it measures: keep its own folder off the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from episodes.ingest import Prepared, store_episode  # noqa: E402
from episodes.spec import SampleSpec  # noqa: E402
from episodes.synth import FleetConfig, synth_episode  # noqa: E402
from episodes.writer import WriteOptions  # noqa: E402
from manifests import ManifestMeta, build_manifest  # noqa: E402
from trainer.config import load_config  # noqa: E402
from trainer.launch import LaunchResult, launch_run  # noqa: E402


@dataclass(frozen=True)
class Params:
    episodes: int
    stall_steps: int
    main_steps: int | None  # None: at least run_to_restart x the measured restart time
    run_to_restart: float = 25.0
    fault_at: float = 0.6
    seed: int = 7
    width: int = 64
    height: int = 48
    camera_hz: float = 5.0
    duration_s: tuple[float, float] = (6.0, 8.0)
    ranks: int = 2
    batch_size: int = 16
    channels: tuple[int, ...] = (128, 256, 512)
    embed_dim: int = 128
    hidden_dim: int = 512
    workers: int = 1
    prefetch_batches: int = 4
    stream_batches: int = 2
    stall_interval_steps: int = 10


FULL = Params(episodes=48, stall_steps=40, main_steps=None)
SMALL = Params(episodes=16, stall_steps=20, main_steps=60, channels=(64, 128, 256))
SPEC = SampleSpec(
    control_hz=50.0, frames_per_camera=2, state_history=4, action_horizon=8, anchor_stride=10
)


def norm_stats(prepared: list[Prepared]) -> dict[str, Any]:
    """Per-dimension sums over all episodes (the service's aggregate: count is the largest)."""
    out: dict[str, Any] = {}
    for name in ("state", "action"):
        rows = [s for p in prepared for s in p.stats if s.field == name]
        dims = max(s.dim for s in rows) + 1
        total, squares, counts = np.zeros(dims), np.zeros(dims), np.zeros(dims, dtype=np.int64)
        for s in rows:
            total[s.dim] += s.sum
            squares[s.dim] += s.sum_sq
            counts[s.dim] += s.count
        out[name] = {"count": int(counts.max()), "sum": total.tolist(), "sum_sq": squares.tolist()}
    return out


def make_corpus(root: Path, params: Params) -> Path:
    """Write the synthetic containers and a manifest over them; return the manifest's path."""
    fleet = FleetConfig(
        width=params.width,
        height=params.height,
        cameras=(("front", params.camera_hz), ("wrist", params.camera_hz)),
        duration_s=params.duration_s,
        fault_rate=0.0,
    )
    prepared = [
        store_episode(synth_episode(params.seed, i, fleet), root / "objects", WriteOptions())
        for i in range(params.episodes)
    ]
    records = [p.record for p in prepared]
    starts = np.array([r.start_ns for r in records], dtype=np.int64)
    ends = np.array([r.end_ns for r in records], dtype=np.int64)
    table = pa.table(
        {
            "episode_id": [r.episode_id for r in records],
            "uri": [r.uri for r in records],
            "start_ns": starts,
            "end_ns": ends,
            "num_samples": SPEC.count_samples(starts, ends),
            "size_bytes": [r.size_bytes for r in records],
            "sha256": [r.sha256 for r in records],
        }
    )
    meta = ManifestMeta(
        sql="SELECT * FROM episodes", sample_spec=SPEC.to_dict(), norm_stats=norm_stats(prepared)
    )
    return build_manifest(table, meta, root / "manifests").path


def train(root: Path, manifest: Path, params: Params, name: str, **values: Any) -> LaunchResult:
    """One job of ``params.ranks`` ranks; returns how it ended (its summary included)."""
    settings = {
        "state_dir": str(root / "state"),
        "run_name": name,
        "manifest.path": str(manifest),
        "seed": params.seed,
        "loader.batch_size": params.batch_size,
        "model.channels": list(params.channels),
        "model.embed_dim": params.embed_dim,
        "model.hidden_dim": params.hidden_dim,
        "data.num_workers": params.workers,
        "data.prefetch_batches": params.prefetch_batches,
        "data.stream_batches": params.stream_batches,
        "launch.nproc_per_node": params.ranks,
        "launch.max_restarts": 0,
        "log_every": 50,
        **values,
    }
    log = root / "logs" / f"{name}.log"
    result = launch_run(load_config(values=settings), python=sys.executable, log_path=log)
    if result.exit_code != 0 or result.summary is None:
        raise SystemExit(f"benchmark run {name} failed ({result.exit_code}); see {log}")
    return result


def stall_run(root: Path, manifest: Path, params: Params, mode: str) -> dict[str, Any]:
    """A short fault-free run saving every ``stall_interval_steps`` in ``mode``."""
    result = train(
        root,
        manifest,
        params,
        f"stall-{mode}",
        steps=params.stall_steps,
        **{
            "checkpoint.mode": mode,
            "checkpoint.interval": "steps",
            "checkpoint.interval_steps": params.stall_interval_steps,
        },
    )
    assert result.summary is not None
    return result.summary


def main_run(
    root: Path, manifest: Path, params: Params, steps: int, planned_s: float
) -> dict[str, Any]:
    """Async saves on the Young/Daly interval, one rank killed part way through."""
    result = train(
        root,
        manifest,
        params,
        "main",
        steps=steps,
        **{
            "checkpoint.mode": "async",
            "checkpoint.interval": "young_daly",
            "checkpoint.interval_steps": max(2, steps // 20),
            "checkpoint.mtbf_node_s": planned_s,
            "launch.max_restarts": 1,
            "faults.kill_rank": 1,
            "faults.kill_at_step": int(steps * params.fault_at),
        },
    )
    assert result.summary is not None
    return result.summary


def run(params: Params, root: Path) -> dict[str, Any]:
    started = time.monotonic()
    load_start = os.getloadavg()
    manifest = make_corpus(root, params)
    sync = stall_run(root, manifest, params, "sync")
    async_ = stall_run(root, manifest, params, "async")
    step_s = float(sync["step_time_s"])
    # A restart: torchrun notices the failure, stops the survivors, starts new workers.
    restart_s = float(sync["time_s"]["initialization"]) + 4.0
    steps = params.main_steps or math.ceil(params.run_to_restart * restart_s / step_s)
    main = main_run(root, manifest, params, steps, planned_s=steps * step_s)
    recovery = main["recovery"] or {}
    interval_s = main["checkpoints"]["interval_s"] or 0.0
    lost = recovery.get("lost_work_s")
    recovery_s = recovery.get("recovery_s")
    ratio = main["wall_s"] / recovery_s if recovery_s else None
    return {
        "benchmark": "trainer",
        "params": {**asdict(params), "spec": SPEC.to_dict()},
        "goodput_fraction": main["goodput_fraction"],
        "checkpoint_stall_s": {
            "sync": sync["checkpoints"]["mean_stall_s"],
            "async": async_["checkpoints"]["mean_stall_s"],
        },
        "async_stall_vs_sync": _ratio(
            sync["checkpoints"]["mean_stall_s"], async_["checkpoints"]["mean_stall_s"]
        ),
        "checkpoint_write_s": {
            "sync": sync["checkpoints"]["mean_write_s"],
            "async": async_["checkpoints"]["mean_write_s"],
        },
        "recovery_s": recovery_s,
        "lost_work_s": lost,
        "checkpoint_interval_s": interval_s,
        "checkpoints_saved": main["checkpoints"]["saved"],
        "run_to_restart_ratio": round(ratio, 2) if ratio else None,
        "steps": main["steps"],
        "wall_s": main["wall_s"],
        "time_s": main["time_s"],
        "step_time_s": main["step_time_s"],
        "data_wait_share": main["data_wait_share"],
        "data_wait_share_all": main["data_wait_share_all"],
        "data_wait_by_site_s": main["data_wait_by_site_s"],
        "data_wait_max_s": main["data_wait_max_s"],
        "gc_pause_s": main["gc_pause_s"],
        "samples_per_s": main["samples_per_s"],
        "mfu": main["mfu"],
        "loss": {"first": main["first_loss_mean"], "last": main["last_loss_mean"]},
        "targets": {
            "goodput_fraction_ge_0.9": main["goodput_fraction"] >= 0.9,
            "lost_work_within_one_interval": lost is not None
            and lost <= interval_s + 2 * float(main["step_time_s"]),
            "run_ge_20x_restart": ratio is not None and ratio >= 20,
        },
        "benchmark_s": round(time.monotonic() - started, 1),
        "load_average": {
            "start": [round(v, 2) for v in load_start],
            "end": [round(v, 2) for v in os.getloadavg()],  # 1, 5, 15 minutes
        },
    }


def _ratio(baseline: float | None, value: float | None) -> float | None:
    return round(baseline / value, 2) if baseline and value else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI size: fewer steps, no 20x rule")
    parser.add_argument("--workdir", type=Path, help="keep the corpus and runs here")
    args = parser.parse_args()
    params = SMALL if args.small else FULL
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        result = run(params, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="quarry-bench-trainer-") as tmp:
            result = run(params, Path(tmp))
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
