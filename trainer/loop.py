"""The step loop: fetch a batch, step the optimizer, checkpoint on schedule, keep the books.

Every rank runs the same loop in lockstep (DDP's gradient all-reduce keeps them together), so
decisions that need a collective (checkpointing, agreeing on the next interval) happen at the
same step everywhere.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from .checkpoint import Checkpointer, CheckpointRef, SaveRecord
from .cluster import Cluster
from .config import TrainerConfig
from .goodput import GoodputMeter, Phase, Timeline, mfu
from .marker import MANIFEST_KEY
from .metrics import MetricsExporter
from .policy import Batch, batch_loss
from .records import RunRecords, write_json
from .rng import capture_rng, restore_rng
from .schedule import CheckpointSchedule
from .sharding import load_state_dicts, state_dicts

if TYPE_CHECKING:
    from .data import Fetch

log = logging.getLogger(__name__)


class DataFeed(Protocol):
    """What the loop needs from the data side (see :mod:`trainer.data`)."""

    #: The ID of the manifest the run trains on (its checkpoints record it), if known.
    manifest_id: str | None

    def next_batch(self) -> Fetch: ...

    def consumed(self, batch: Batch) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class Run:
    """One rank's training state and the services around it."""

    config: TrainerConfig
    cluster: Cluster
    model: nn.Module
    optimizer: torch.optim.Optimizer
    feed: DataFeed
    checkpointer: Checkpointer
    schedule: CheckpointSchedule
    meter: GoodputMeter
    records: RunRecords
    exporter: MetricsExporter
    step: int = 0
    start_step: int = 0
    last_loss: float | None = None
    last_saved_step: int | None = None
    flops_per_step: float = 0.0
    saves: list[SaveRecord] = field(default_factory=list)
    timeline: Timeline | None = None
    _next_heartbeat: float = 0.0
    _next_export: float = 0.0


def checkpoint_state(run: Run) -> dict[str, Any]:
    """What a checkpoint holds: model, optimizer (this rank's shard, when sharded), step
    (shared); RNG and sampler (per rank)."""
    model_state, optim_state = state_dicts(run.model, run.optimizer)
    rank = run.cluster.world.rank
    return {
        "model": model_state,
        "optim": optim_state,
        "progress": {"step": torch.tensor(run.step, dtype=torch.int64)},
        f"rank{rank}": {"rng": capture_rng(), "sampler": run.feed.state_dict()},
    }


def restore(run: Run, ref: CheckpointRef) -> None:
    """Load checkpoint ``ref`` into the run: weights, optimizer, step, RNG, sampler position."""
    state = checkpoint_state(run)
    run.checkpointer.load(ref, state)
    load_state_dicts(run.model, run.optimizer, state["model"], state["optim"])
    own = state[f"rank{run.cluster.world.rank}"]
    restore_rng(own["rng"])
    run.feed.load_state_dict(own["sampler"])
    run.step = run.start_step = run.last_saved_step = int(state["progress"]["step"])


def train_step(run: Run, batch: Batch) -> float:
    """One optimizer step on ``batch``; returns this rank's loss."""
    run.optimizer.zero_grad(set_to_none=True)
    loss = batch_loss(run.model, batch, run.cluster.device)
    loss.backward()  # type: ignore[no-untyped-call]
    if run.config.optim.grad_clip > 0:
        nn.utils.clip_grad_norm_(run.model.parameters(), run.config.optim.grad_clip)
    run.optimizer.step()
    return float(loss.detach())


@dataclass(frozen=True)
class Vote:
    """What every rank agreed on when a save fell due (maxima over ranks).

    :param busy: some rank is still writing the previous async save.
    :param cost_s: the previous save's stall, seconds (0 before the first).
    :param step_s: the recent mean step time, seconds.
    :param write_s: the last complete write's duration, seconds (0 before the first).
    """

    busy: bool
    cost_s: float
    step_s: float
    write_s: float


def vote(run: Run) -> Vote:
    """One all-reduce when a save is due: may it start now, and the schedule's inputs.

    A save is put off by a step rather than blocking on the previous one; because ranks vote,
    they all save, and plan the next save, at the same step.
    """
    writes = [r.write_s for r in run.checkpointer.records if r.write_s is not None]
    busy, cost, step_s, write_s = run.cluster.agree_max(
        [
            1.0 if run.checkpointer.busy else 0.0,
            run.saves[-1].stall_s if run.saves else 0.0,
            run.meter.mean_step_s(),
            writes[-1] if writes else 0.0,
        ]
    )
    return Vote(busy > 0, cost, step_s, write_s)


def save_checkpoint(run: Run, agreed: Vote | None = None) -> SaveRecord:
    """Checkpoint the current step; plan the next save from the agreed measurements.

    Young/Daly needs a measured cost, so the interval after the first save stays the
    configured first interval.
    """
    with run.meter.phase(Phase.CHECKPOINT, "save"):
        info = {
            "wall": time.time(),
            "world_size": run.cluster.world.world_size,
            "ledger": run.meter.ledger.snapshot(),
            # the lineage of what the checkpoint learned from (evaluation results link to it)
            MANIFEST_KEY: run.feed.manifest_id,
        }
        record = run.checkpointer.save(run.step, checkpoint_state(run), info)
    if run.step >= run.config.steps:
        plan = run.schedule.plan  # the final save: nothing left to plan
    elif agreed is not None and run.saves:
        plan = run.schedule.plan_after_save(run.step, agreed.cost_s, agreed.step_s, agreed.write_s)
    else:
        plan = run.schedule.plan_first(run.step)
    run.last_saved_step = run.step
    run.saves.append(record)
    if run.cluster.world.is_coordinator:
        log.info(
            "checkpoint at step %d: stall %.3f s, next at step %d",
            run.step,
            record.stall_s,
            plan.next_step,
        )
    return record


def inject_fault(run: Run) -> None:
    """SIGKILL this rank at the configured step and attempt, or wait ``step_delay_s`` at each
    step (drills, tests, the benchmark)."""
    faults = run.config.faults
    world = run.cluster.world
    if faults.step_delay_s:
        time.sleep(faults.step_delay_s)
    if (
        faults.kill_at_step == run.step
        and world.rank == faults.kill_rank
        and world.restart_count == faults.attempt
    ):
        write_json(
            run.records.fault_path(world.restart_count),
            {"rank": world.rank, "step": run.step, "wall": time.time()},
        )
        log.warning("fault injection: killing rank %d at step %d", world.rank, run.step)
        os.kill(os.getpid(), signal.SIGKILL)


def train(run: Run) -> None:
    """Train until ``config.steps``; checkpoint on schedule and after the last step."""
    run.meter.start_training()
    first = True
    while run.step < run.config.steps:
        inject_fault(run)
        # Data wait is what the feed measured: blocked on the batch, or starting an epoch's
        # workers; a checkpoint wait inside next_batch() is charged to its own phase.
        fetch = run.feed.next_batch()
        fetched = time.perf_counter()
        blocked_s, epoch_start_s = fetch.blocked_s, fetch.epoch_start_s
        loss, samples = step_on(run, fetch.batch)
        # The batch's last reference: its shared memory is released now, in the step's time
        # (about 1 ms for a few MB), while the stream's thread is idle, rather than when the
        # next batch is taken, where the two would contend for the GIL.
        del fetch
        compute_s = time.perf_counter() - fetched
        run.meter.record_step(blocked_s, compute_s, len(samples), loss, epoch_start_s)
        if first and run.timeline is not None:
            run.timeline.mark("first_step")
            first = False
        if run.config.record_samples:
            run.records.record_samples(run.step, samples)
        after_step(run)
    finish(run)


def step_on(run: Run, batch: Batch) -> tuple[float, list[int]]:
    """Train one step on ``batch`` and mark it consumed; returns the loss and the batch's
    sample indices."""
    loss = run.last_loss = train_step(run, batch)
    run.step += 1
    run.feed.consumed(batch)
    return loss, [int(s) for s in batch["sample_index"].tolist()]


def after_step(run: Run) -> None:
    """Commit finished saves, checkpoint when due, heartbeat, export, log."""
    with run.meter.phase(Phase.CHECKPOINT, "commit"):
        run.checkpointer.poll()
    if run.schedule.due(run.step) and run.step < run.config.steps:
        with run.meter.phase(Phase.CHECKPOINT, "vote"):
            agreed = vote(run)
        if not agreed.busy:
            save_checkpoint(run, agreed)
    now = time.monotonic()
    if run.cluster.world.is_coordinator and now >= run._next_heartbeat:
        run.records.write_progress(run.step, time.time(), run.meter.ledger.run_started_wall)
        run._next_heartbeat = now + run.config.goodput.heartbeat_s
    if now >= run._next_export:
        export_metrics(run)
        run._next_export = now + run.config.goodput.export_every_s
    if run.cluster.world.is_coordinator and run.step % run.config.log_every == 0:
        log.info(
            "step %d/%d loss %.5f step %.4f s",
            run.step,
            run.config.steps,
            run.last_loss or 0.0,
            run.meter.mean_step_s(),
        )


def finish(run: Run) -> None:
    """Final checkpoint (if configured and not already taken), then wait for pending saves."""
    if run.config.checkpoint.save_final and run.last_saved_step != run.step:
        save_checkpoint(run)
    with run.meter.phase(Phase.CHECKPOINT, "final_wait"):
        run.checkpointer.wait()
    if run.cluster.world.is_coordinator:
        run.records.write_progress(run.step, time.time(), run.meter.ledger.run_started_wall)
    export_metrics(run)


def run_figures(run: Run) -> dict[str, float]:
    """This rank's headline figures (the gauges of :data:`trainer.metrics.GAUGES`)."""
    ledger = run.meter.ledger
    wall = max(time.time() - ledger.run_started_wall, 1e-9)
    step_s = run.meter.mean_step_s(last=len(run.meter.step_seconds))
    batch = run.config.loader.batch_size
    return {
        "step": float(run.step),
        "loss": run.last_loss if run.last_loss is not None else float("nan"),
        "goodput_fraction": ledger.seconds[Phase.COMPUTE] / wall,
        "step_time_seconds": step_s,
        "samples_per_second": batch / step_s if step_s > 0 else 0.0,
        "mfu": mfu(run.flops_per_step, step_s, run.config.goodput.peak_flops),
        "restarts": float(run.cluster.world.restart_count),
        "wall_seconds": wall,
    }


def export_metrics(run: Run) -> None:
    """Update and export this rank's gauges."""
    phases = {str(p): s for p, s in run.meter.ledger.seconds.items()}
    run.exporter.update(run_figures(run), phases)
    run.exporter.export()
