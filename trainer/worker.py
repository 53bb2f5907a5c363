"""One rank, start to end: manifest, preflight, join, build, resume, train, summarize.

The order matters: every check that concerns this node alone (manifest, device, disk, cache)
runs before the process joins the process group, so a bad node fails without touching the job;
the collective smoke test runs right after joining.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.flop_counter import FlopCounterMode

from loader.delivery import deliver_manifest

from .checkpoint import Checkpointer, CheckpointRef, CheckpointStore
from .cluster import Cluster, join_cluster, pick_device
from .config import TrainerConfig
from .data import DataFeed, open_feed
from .errors import CheckpointError
from .goodput import GoodputMeter, Ledger, Phase, Recovery, Timeline, resume_ledger
from .loop import Run, restore, train
from .metrics import MetricsExporter
from .policy import Batch, Policy, PolicyShape, batch_loss
from .preflight import (
    PreflightReport,
    check_collective,
    check_device,
    check_disk,
    check_manifest,
    required_disk_bytes,
)
from .records import RunRecords
from .rendezvous import count_attempt
from .rng import seed_everything
from .schedule import CheckpointSchedule
from .sharding import build_optimizer, shard_scope
from .summary import build_summary
from .world import World

log = logging.getLogger(__name__)


def run_worker(config: TrainerConfig, world: World, started_wall: float) -> dict[str, Any]:
    """Run this rank's part of the job; return the end-of-run summary (rank 0's is printed).

    :param started_wall: Unix time this process started, seconds.
    """
    assert config.run_name is not None
    timeline = Timeline(started_wall)
    timeline.mark("startup")
    records = RunRecords(config.runs_dir / config.run_name, world.rank, world.restart_count)
    report = PreflightReport()
    manifest_path = deliver_manifest(
        config.manifest, config.manifests_dir, leader=world.is_node_leader, run=config.run_name
    )
    if config.preflight.enabled:
        report.run("manifest", lambda: check_manifest(manifest_path, world), world.rank)
    timeline.mark("manifest")
    feed = open_feed(config, world, manifest_path)
    if config.preflight.enabled and config.preflight.warm_cache:
        report.run("cache", feed.warm_node_share, world.rank)
    probe = feed.probe_batch()
    seed_everything(config.seed)
    module = Policy(PolicyShape.from_batch(probe), config.model)
    local_checks(config, world, module, report)
    timeline.mark("local_checks")
    cluster = join_cluster(config, world)
    try:
        if config.preflight.enabled:
            report.run(
                "collective", lambda: check_collective(cluster, config.preflight), world.rank
            )
        timeline.mark("join")
        cluster.world = agreed_attempt(cluster, config.dist_timeout_s)
        records.attempt = cluster.world.restart_count
        run = build_run(config, cluster, module, feed, records, probe, started_wall)
        run.timeline = timeline
        timeline.mark("build_and_resume")
        feed.before_new_epoch = lambda: wait_for_checkpoint(run)
        feed.may_fork = lambda: not run.checkpointer.busy
        freeze_heap()
        gc.callbacks.append(run.meter.gc)
        try:
            train(run)
        finally:
            gc.callbacks.remove(run.meter.gc)
        return build_summary(run, report, feed.cache_counters(), manifest_path)
    finally:
        feed.close()
        records.close()
        cluster.leave()


def freeze_heap() -> None:
    """Take everything built so far (torch, pyarrow, the manifest, the model) out of the cyclic
    garbage collector's reach, once, before the first step.

    A full collection walks every tracked object; with the heap of a set-up trainer that
    stalled a step for more than a second (seen in the loader benchmark). Frozen objects are
    never collected (they live as long as the run anyway); what the steps allocate is still
    collected, and those pauses are counted (``gc_pause_s`` in the summary). There is no
    ``gc.collect()`` first: that one full collection costs what freezing avoids (0.8-1.6 s
    before the first step in the benchmark, two ranks on two busy cores), and the few cycles
    it would free are kept instead. Forked DataLoader workers also leave the frozen objects'
    pages shared instead of copying them when their collector would touch them.
    """
    gc.freeze()


def agreed_attempt(cluster: Cluster, timeout_s: float) -> World:
    """This rank's place with the job's attempt number, the same on every rank.

    Each torchrun agent counts its own restarts. When a rank on one node dies, that node's agent
    counts a failure, but another node's agent may restart its workers for the new rendezvous
    round without counting one (seen with two agents: ranks 0-1 at 0 and ranks 2-3 at 1 in the
    same attempt), and rank 0 would then account the restart as a first start. So the attempt
    is the highest of every rank's restart count and, under torchrun, of the attempts rank 0
    counted in the agent store before this one (:func:`trainer.rendezvous.count_attempt`).
    Both only ever fall short: the restart counts when failures hit different nodes in turn,
    the store's count by an attempt that failed before its rank 0 got here (which the failed
    node's agent did count).
    """
    world = cluster.world
    counted = count_attempt(world, timeout_s) if world.agent_store and world.rank == 0 else 0
    count = int(max(cluster.agree_max([float(world.restart_count), float(counted)])))
    return dataclasses.replace(world, restart_count=count)


def wait_for_checkpoint(run: Run) -> None:
    """Finish a pending async save (charged as checkpoint stall)."""
    with run.meter.phase(Phase.CHECKPOINT, "epoch_wait"):
        run.checkpointer.wait()


def local_checks(
    config: TrainerConfig, world: World, module: nn.Module, report: PreflightReport
) -> None:
    """The device and disk gates (after the model exists, so its size is known)."""
    if not config.preflight.enabled:
        return
    device, _ = pick_device(config, world)
    report.run("device", lambda: check_device(device), world.rank)
    required = required_disk_bytes(config.preflight, module, config.checkpoint.keep_last)
    report.run("disk", lambda: check_disk(config.checkpoints_dir, required), world.rank)


def measure_flops(module: nn.Module, probe: Batch, batch_size: int, device: torch.device) -> float:
    """FLOPs of one training step of one rank (forward and backward), from a probe sample."""
    counter = FlopCounterMode(display=False)
    with counter:
        loss = batch_loss(module, probe, device)
        loss.backward()  # type: ignore[no-untyped-call]
    module.zero_grad(set_to_none=True)
    return float(counter.get_total_flops()) * batch_size / len(probe["sample_index"])


def wrap_model(
    module: nn.Module, cluster: Cluster, config: TrainerConfig
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The DDP-wrapped model and its AdamW optimizer (sharded as ``optim.shard`` says)."""
    device_ids = [cluster.device.index] if cluster.device.type == "cuda" else None
    model = DistributedDataParallel(module, device_ids=device_ids)
    scope = shard_scope(config.optim.shard, cluster.world)
    return model, build_optimizer(model, config.optim, scope, cluster.world)


def settle_buckets(model: nn.Module, loss: Callable[[], torch.Tensor]) -> None:
    """One forward and backward through DDP before the first step, gradients dropped.

    DDP's first backward reduces gradients in buckets of reverse parameter order, then
    rebuilds the buckets in the order the gradients became ready. With more than two ranks an
    all-reduce adds an element's contributions in an order that depends on its place in the
    bucket, so without this the first step of a fresh attempt and of a resumed one would sum
    differently in the last bits, and a resumed run would drift from an uninterrupted one
    (seen with 4 gloo ranks). After it, every step of every attempt uses the rebuilt buckets.
    Run in eval mode, so no normalization statistics move.
    """
    training = model.training
    model.eval()
    loss().backward()  # type: ignore[no-untyped-call]
    model.zero_grad(set_to_none=True)
    model.train(training)


def build_run(
    config: TrainerConfig,
    cluster: Cluster,
    module: nn.Module,
    feed: DataFeed,
    records: RunRecords,
    probe: Batch,
    started_wall: float,
) -> Run:
    """Wrap the model in DDP, make the optimizer, resume from the latest checkpoint."""
    world = cluster.world
    module.to(cluster.device)
    flops = measure_flops(module, probe, config.loader.batch_size, cluster.device)
    model, optimizer = wrap_model(module, cluster, config)
    settle_buckets(model, lambda: batch_loss(model, probe, cluster.device))
    store = CheckpointStore(config.checkpoints_dir / str(config.run_name))
    checkpointer = Checkpointer(
        store, config.checkpoint, cluster.checkpoint_group, world.is_coordinator
    )
    ref = latest_checkpoint(cluster, store, config) if config.checkpoint.resume else None
    ledger, recovery = open_ledger(records, world, ref, started_wall)
    run = Run(
        config=config,
        cluster=cluster,
        model=model,
        optimizer=optimizer,
        feed=feed,
        checkpointer=checkpointer,
        schedule=CheckpointSchedule(config.checkpoint, world.num_nodes, 0),
        meter=GoodputMeter(ledger, started_wall, recovery),
        records=records,
        exporter=MetricsExporter(
            config.goodput, records.metrics_dir, str(config.run_name), world.rank
        ),
        flops_per_step=flops,
    )
    if ref is not None:
        restore(run, ref)
        run.schedule = CheckpointSchedule(config.checkpoint, world.num_nodes, run.step)
        log.info("resumed from %s at step %d", ref.path.name, run.step)
    feed.start()
    return run


def latest_checkpoint(
    cluster: Cluster, store: CheckpointStore, config: TrainerConfig
) -> CheckpointRef | None:
    """Rank 0 picks the newest complete checkpoint (and clears partial ones); all ranks agree."""
    chosen: int | None = None
    if cluster.world.is_coordinator:
        store.prune(config.checkpoint.keep_last, keep_partial_above=False)
        latest = store.latest()
        chosen = None if latest is None else latest.step
    step = cluster.broadcast(chosen)
    if step is None:
        return None
    for ref in store.committed():
        if ref.step == step:
            return ref
    # Rank 0 chose it, but this node cannot see it: checkpoints need a shared filesystem.
    raise CheckpointError(
        "checkpoint chosen by rank 0 is not visible on this node", path=str(store.step_path(step))
    )


def open_ledger(
    records: RunRecords, world: World, ref: CheckpointRef | None, started_wall: float
) -> tuple[Ledger, Recovery | None]:
    """The goodput ledger: fresh, continued from a checkpoint, or reconciled after a failure."""
    base = ref.info.get("ledger") if ref is not None else None
    if world.restart_count == 0:
        if base is None:
            return Ledger(run_started_wall=started_wall), None
        ledger = Ledger.from_snapshot(base)
        ledger.run_started_wall = started_wall - ledger.total_s
        return ledger, None
    progress = records.read_progress() or {}
    fault = records.read_fault(world.restart_count - 1) or {}
    failure_wall = float(fault.get("wall", progress.get("wall", started_wall)))
    run_started = float(progress.get("run_started", started_wall))
    return resume_ledger(base, run_started, failure_wall)
