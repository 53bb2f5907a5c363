"""Preflight: the gates a node passes before it joins the job, each timed and reported.

Local checks run before the process joins the process group, so a bad node exits with a clear
reason and a distinct exit code (see :data:`trainer.errors.PREFLIGHT_CODES`) without touching
the job: ``manifest`` (present, opens, hashes to its ID), ``device`` (the accelerator or CPU
computes correctly), ``disk`` (free space for the checkpoints kept) and ``cache`` (the node's
share of the episodes is local, warmed now if not). ``collective`` runs right after joining: an
exact all-reduce on both process groups and a timed one.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from manifests import ManifestError, is_manifest_id, open_manifest

from .cluster import Cluster
from .config import PreflightSection
from .errors import PreflightError, TrainerError
from .world import World

_HEADROOM = 1.2
_BYTES_PER_PARAM_STATE = 3  # weights plus AdamW's two moments


@dataclass
class PreflightReport:
    """Each check's duration and findings, by check name."""

    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, name: str, check: Callable[[], dict[str, Any]], rank: int) -> dict[str, Any]:
        """Run ``check`` as preflight check ``name``; any failure becomes a PreflightError.

        A refusal ends the job without restarts; an error raised inside the ``collective``
        check (a peer that died, a connection lost) is retryable: a restart re-forms the group.
        """
        started = time.perf_counter()
        try:
            detail = check()
        except PreflightError:
            raise
        except (TrainerError, ManifestError, OSError, RuntimeError, ValueError) as exc:
            retry = name == "collective" or getattr(exc, "retryable", False)
            raise PreflightError(
                f"{name} check failed: {exc}", check=name, rank=rank, retryable=retry
            ) from exc
        self.checks[name] = {**detail, "seconds": round(time.perf_counter() - started, 6)}
        return detail


def check_manifest(path: Path, world: World) -> dict[str, Any]:
    """The manifest opens by memory map; the node leader hashes a file named by its ID."""
    manifest = open_manifest(path)
    verified = False
    if world.is_node_leader and is_manifest_id(path.name.removesuffix(".arrow")):
        manifest.verify()
        verified = True
    if manifest.num_samples == 0:
        raise PreflightError("manifest holds no samples", check="manifest", path=str(path))
    return {"rows": manifest.num_rows, "samples": manifest.num_samples, "hashed": verified}


def check_device(device: torch.device) -> dict[str, Any]:
    """A matrix product on ``device`` matches a float64 CPU reference; reports memory."""
    if device.type == "cuda":
        if not torch.cuda.is_available() or device.index is None:
            raise PreflightError("CUDA device unavailable", check="device")
        if device.index >= torch.cuda.device_count():
            raise PreflightError(f"no CUDA device {device.index}", check="device")
    generator = torch.Generator().manual_seed(1234)
    a = torch.randn(256, 256, generator=generator)
    reference = a.double() @ a.double()
    started = time.perf_counter()
    result = (a.to(device) @ a.to(device)).double().cpu()
    seconds = time.perf_counter() - started
    error = float((result - reference).abs().max() / reference.abs().max())
    if not error < 1e-3:
        raise PreflightError(f"wrong matrix product (relative error {error:.2e})", check="device")
    detail: dict[str, Any] = {"device": str(device), "matmul_s": seconds, "rel_error": error}
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        detail.update(memory_free_bytes=free, memory_total_bytes=total)
    else:
        detail["threads"] = torch.get_num_threads()
    return detail


def checkpoint_bytes(model: nn.Module) -> int:
    """Rough size of one checkpoint of ``model`` with AdamW state, bytes."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return params * _BYTES_PER_PARAM_STATE + buffers


def check_disk(directory: Path, required_bytes: int) -> dict[str, Any]:
    """At least ``required_bytes`` free on the filesystem holding ``directory``."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < required_bytes:
        raise PreflightError(
            f"{free} bytes free where checkpoints go, {required_bytes} needed",
            check="disk",
            path=str(directory),
        )
    return {"free_bytes": free, "required_bytes": required_bytes}


def required_disk_bytes(config: PreflightSection, model: nn.Module, keep_last: int) -> int:
    """The configured minimum, or the kept checkpoints plus one in flight, with headroom."""
    if config.min_free_disk_bytes is not None:
        return config.min_free_disk_bytes
    return int(checkpoint_bytes(model) * (keep_last + 1) * _HEADROOM)


def check_collective(cluster: Cluster, config: PreflightSection) -> dict[str, Any]:
    """Exact all-reduces on both groups, then ``smoke_rounds`` timed ones of ``smoke_bytes``."""
    world = cluster.world
    expected = world.world_size * (world.world_size + 1) / 2
    device = cluster.device
    for group, where in ((None, device), (cluster.checkpoint_group, torch.device("cpu"))):
        probe = torch.tensor([float(world.rank + 1)], device=where)
        dist.all_reduce(probe, group=group)
        if float(probe.item()) != expected:
            raise PreflightError(
                f"all-reduce returned {probe.item()}, expected {expected}", check="collective"
            )
    payload = torch.ones(config.smoke_bytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(payload)  # warm-up: connections, buffers
    started = time.perf_counter()
    for _ in range(config.smoke_rounds):
        payload.fill_(1.0)
        dist.all_reduce(payload)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    slowest = cluster.agree_max([seconds])[0]
    if slowest > config.max_smoke_s or float(payload[0]) != world.world_size:
        raise PreflightError(
            f"collective smoke test took {slowest:.3f} s (limit {config.max_smoke_s} s)",
            check="collective",
        )
    per_round = slowest / config.smoke_rounds
    factor = 2 * (world.world_size - 1) / world.world_size if world.world_size > 1 else 1.0
    return {
        "world_size": world.world_size,
        "bytes": config.smoke_bytes,
        "round_s": per_round,
        "bus_bandwidth_bytes_per_s": config.smoke_bytes * factor / per_round if per_round else 0.0,
    }
