"""The end-of-run summary: one JSON object, printed by rank 0 as one line and saved to disk.

Figures are rank 0's, except ``samples_per_s`` (all ranks) and the cache counters (this node).
See ``docs/trainer.md`` for every field.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from .goodput import LOSS_WINDOW, Phase
from .loop import Run, run_figures
from .preflight import PreflightReport
from .sharding import optimizer_state_bytes, shard_scope

SUMMARY_EVENT = "train_summary"


def _round(value: float | None, digits: int = 6) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return _round(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def _mean(values: list[float]) -> float | None:
    return _round(sum(values) / len(values)) if values else None


def checkpoint_figures(run: Run) -> dict[str, Any]:
    """Saves made by this attempt: count, mode, stall and write times, the interval in use."""
    saves = run.saves
    stalls = [s.stall_s for s in saves]
    writes = [s.write_s for s in saves if s.write_s is not None]
    plan = run.schedule.plan
    return {
        "saved": sum(1 for s in saves if s.ok),
        "failed": sum(1 for s in saves if not s.ok),
        "mode": run.config.checkpoint.mode,
        "stall_s": _round(sum(stalls)),
        "mean_stall_s": _round(sum(stalls) / len(stalls)) if stalls else None,
        "mean_write_s": _round(sum(writes) / len(writes)) if writes else None,
        "last_step": run.last_saved_step,
        "interval": run.config.checkpoint.interval,
        "interval_s": _round(plan.interval_s),
        "mtbf_s": _round(run.schedule.mtbf_s),
        "stall_by_site_s": {site: _round(s) for site, s in sorted(run.meter.sites.items())},
        "path": str(run.checkpointer.store.root),
    }


def step_figures(run: Run) -> dict[str, Any]:
    """Speed and loss: steps, step time, data wait, samples/s (summed over ranks), losses."""
    figures = run_figures(run)
    meter, ledger = run.meter, run.meter.ledger
    loop_s = sum(meter.step_seconds)
    total_rate = run.cluster.agree_sum([figures["samples_per_second"]])[0]
    recent = meter.step_seconds[-LOSS_WINDOW:]
    return {
        "steps": run.step,
        "steps_this_attempt": run.step - run.start_step,
        "steps_per_s": _round(len(meter.step_seconds) / loop_s) if loop_s > 0 else None,
        "samples_per_s": _round(total_rate),
        "step_time_s": _round(figures["step_time_seconds"]),
        "recent_step_time_s": _round(sum(recent) / len(recent)) if recent else None,
        **data_figures(run),
        "first_loss": _round(ledger.losses[0]) if ledger.losses else None,
        "last_loss": _round(run.last_loss),
        "first_loss_mean": _mean(ledger.losses),
        "last_loss_mean": _mean(list(meter.recent_losses)),
        "goodput_fraction": _round(figures["goodput_fraction"], 4),
        "wall_s": _round(figures["wall_seconds"], 3),
        "time_s": {str(p): _round(ledger.seconds[p], 3) for p in Phase},
        "mfu": _round(figures["mfu"], 8),
        "flops_per_step": run.flops_per_step,
        "peak_flops": run.config.goodput.peak_flops,
    }


def data_figures(run: Run) -> dict[str, Any]:
    """This attempt's data wait: steady state (after warm-up) and all steps, and by site."""
    meter, warmup = run.meter, run.config.goodput.warmup_steps
    steady = meter.wait_seconds[warmup:]
    return {
        "data_wait_share": _round(meter.data_wait_share(warmup), 4),
        "data_wait_share_all": _round(meter.data_wait_share(0), 4),
        "data_wait_warmup_steps": warmup,
        "data_wait_s": _round(sum(meter.wait_seconds), 3),
        "data_wait_by_site_s": {site: _round(s, 3) for site, s in meter.data_sites.items()},
        "data_wait_p50_s": _quantile(steady, 0.5),
        "data_wait_p99_s": _quantile(steady, 0.99),
        "data_wait_max_s": _round(max(steady)) if steady else None,
        "gc_pause_s": _round(meter.gc.seconds, 4),
        "gc_pauses": meter.gc.count,
        "gc_longest_pause_s": _round(meter.gc.longest_s, 4),
    }


def optimizer_figures(run: Run) -> dict[str, Any]:
    """The optimizer's sharding and the state it holds: this rank's, and summed over ranks
    (collective)."""
    local = optimizer_state_bytes(run.optimizer)
    total = run.cluster.agree_sum([float(local)])[0]
    return {
        "shard": shard_scope(run.config.optim.shard, run.cluster.world),
        "state_bytes": local,
        "state_bytes_all_ranks": int(total),
    }


def recovery_figures(run: Run) -> dict[str, Any] | None:
    """What the last failure cost, on a restarted attempt."""
    recovery = run.meter.recovery
    if recovery is None:
        return None
    return {
        "failure_wall": recovery.failure_wall,
        "lost_work_s": _round(recovery.lost_work_s, 3),
        "recovery_s": _round(recovery.recovery_s, 3),
    }


def build_summary(
    run: Run, report: PreflightReport, cache: dict[str, int] | None, manifest_path: Path
) -> dict[str, Any]:
    """The summary of the run as this rank saw it (collective: every rank must call it)."""
    world = run.cluster.world
    return {
        "event": SUMMARY_EVENT,
        "run_name": run.config.run_name,
        "manifest": manifest_path.name.removesuffix(".arrow"),
        "world_size": world.world_size,
        "nnodes": world.num_nodes,
        "restarts": world.restart_count,
        **step_figures(run),
        "optimizer": optimizer_figures(run),
        "checkpoints": checkpoint_figures(run),
        "recovery": recovery_figures(run),
        "cache": cache,
        "preflight": report.checks,
        "startup_s": run.timeline.durations() if run.timeline is not None else None,
        "finished_wall": time.time(),
    }
