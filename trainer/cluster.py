"""Joining the job: device and backend choice, the process groups, small agreed collectives.

The default group carries training (DDP's all-reduces): NCCL on CUDA, gloo on CPU. Checkpoints
get their own gloo group: asynchronous saves run collectives from a background thread, and on
the default group they deadlocked against the training's collectives.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from .config import TrainerConfig
from .rendezvous import open_attempt_store
from .world import World


def pick_device(config: TrainerConfig, world: World) -> tuple[torch.device, str]:
    """The device of this rank and the default group's backend.

    ``auto``: on CUDA, ``cuda:<local_rank>`` with NCCL (and gloo for CPU tensors); else CPU
    with gloo.
    """
    cuda = torch.cuda.is_available() and config.backend != "gloo"
    if cuda:
        device = torch.device("cuda", world.local_rank % max(1, torch.cuda.device_count()))
        backend = "nccl" if config.backend == "nccl" else "cpu:gloo,cuda:nccl"
        return device, backend
    return torch.device("cpu"), "gloo"


@dataclass
class Cluster:
    """This rank's membership in the job.

    :param world: ranks and sizes. :param device: where the model lives.
    :param backend: the default group's backend.
    :param checkpoint_group: the gloo group dedicated to checkpoint collectives.
    """

    world: World
    device: torch.device
    backend: str
    checkpoint_group: dist.ProcessGroup

    def agree_max(self, values: list[float]) -> list[float]:
        """Element-wise maximum of ``values`` over all ranks (one small all-reduce)."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return [float(v) for v in tensor.cpu().tolist()]

    def agree_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over all ranks."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return [float(v) for v in tensor.cpu().tolist()]

    def broadcast(self, value: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``value`` on every rank (pickled)."""
        box = [value]
        dist.broadcast_object_list(box, src=src, device=self._collective_device())
        return box[0]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index or 0])
        else:
            dist.barrier()

    def _collective_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")

    def leave(self) -> None:
        """Destroy the process groups (the default one last)."""
        if dist.is_initialized():
            dist.destroy_process_group(self.checkpoint_group)
            dist.destroy_process_group()


def join_cluster(config: TrainerConfig, world: World) -> Cluster:
    """Initialize the default process group and the checkpoint group.

    Under torchrun the groups meet on a store of their own attempt (see
    :mod:`trainer.rendezvous`); under a launcher without an agent store (a PyTorchJob running
    ``python -m trainer`` directly) on ``env://``; a lone process makes a world of one over an
    in-memory store.
    """
    device, backend = pick_device(config, world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = dt.timedelta(seconds=config.dist_timeout_s)
    if world.launched:
        store = open_attempt_store(world, config.dist_timeout_s) if world.agent_store else None
        dist.init_process_group(
            backend,
            store=store,
            timeout=timeout,
            rank=world.rank,
            world_size=world.world_size,
            device_id=device if device.type == "cuda" else None,
        )
    else:
        dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1, timeout=timeout)
    group = dist.new_group(backend="gloo", timeout=timeout)
    assert group is not None
    return Cluster(world=world, device=device, backend=backend, checkpoint_group=group)
