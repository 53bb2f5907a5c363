"""Optimizer state sharding (ZeRO stage 1), across the job or within each node.

With sharding on, the optimizer is torch's ``ZeroRedundancyOptimizer`` around AdamW: DDP still
all-reduces every gradient, but each rank of a sharding group keeps AdamW's moments for its own
share of the parameters only (partitioned by size), steps those, and broadcasts them to the
group. Per-parameter AdamW is the same arithmetic on the same gradients, so a sharded run's
weights equal an unsharded run's bit for bit.

Scopes (``optim.shard``): ``none``; ``global`` (one group: the whole job, each rank holds
1/world of the state); ``node`` (one group per node: the state is sharded over the node's ranks
and replicated across nodes, so the broadcasts after each step never leave a node; the choice
once inter-node traffic dominates); ``auto``: ``node`` on several nodes, ``global`` on one.

Checkpoints: a sharded optimizer's state dict is this rank's shard, flattened and keyed by
parameter name (``state.<param>.exp_avg``, ``param_groups.<param>.lr``), so shards of different
ranks never collide in DCP, the replicas of ``node`` sharding are written once, and a rank
loads exactly the entries of the parameters it owns under any scope or world size. An unsharded
optimizer keeps DCP's default layout, so a run resumes with sharding on or off as it started.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from .config import OptimSection
from .world import World

if TYPE_CHECKING:
    from torch.distributed.optim import ZeroRedundancyOptimizer

Scope = Literal["none", "global", "node"]
_FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


def shard_scope(mode: str, world: World) -> Scope:
    """The sharding a run of ``world`` uses for ``optim.shard`` = ``mode``.

    One rank has nothing to share with; ``node`` on one node is ``global`` (the same ranks),
    and with one rank per node it is ``none`` (each node holds the whole state).
    """
    if mode == "none" or world.world_size == 1:
        return "none"
    if mode == "auto":
        mode = "node" if world.num_nodes > 1 else "global"
    if mode == "global" or world.num_nodes == 1:
        return "global"
    return "node" if world.local_world_size > 1 else "none"


def node_group(world: World) -> dist.ProcessGroup:
    """This rank's node as a process group.

    Every rank creates every node's group, in order (ranks ``m * L`` to ``m * L + L - 1`` are
    node ``m``, as torchrun numbers them), and keeps its own.
    """
    group, _ = dist.new_subgroups(group_size=world.local_world_size)  # type: ignore[no-untyped-call]
    assert isinstance(group, dist.ProcessGroup)
    return group


def build_optimizer(
    model: nn.Module, config: OptimSection, scope: Scope, world: World
) -> torch.optim.Optimizer:
    """AdamW over ``model``'s parameters, sharded over ``scope`` (collective unless ``none``)."""
    hyper: dict[str, Any] = {"lr": config.lr, "weight_decay": config.weight_decay}
    if scope == "none":
        return torch.optim.AdamW(model.parameters(), **hyper)
    # Imported only here: the module scripts its functional optimizers with TorchScript on
    # import, 0.15 s of every rank's start (and restart) that an unsharded run does not need.
    from torch.distributed.optim import ZeroRedundancyOptimizer

    group = node_group(world) if scope == "node" else None
    return ZeroRedundancyOptimizer(
        model.parameters(), optimizer_class=torch.optim.AdamW, process_group=group, **hyper
    )


def _zero(optimizer: torch.optim.Optimizer) -> ZeroRedundancyOptimizer | None:
    module = sys.modules.get("torch.distributed.optim")  # not imported: nothing is sharded
    if module is not None and isinstance(optimizer, module.ZeroRedundancyOptimizer):
        return cast("ZeroRedundancyOptimizer", optimizer)
    return None


def _local(optimizer: torch.optim.Optimizer) -> tuple[torch.optim.Optimizer, StateDictOptions]:
    zero = _zero(optimizer)
    if zero is not None:
        local: torch.optim.Optimizer = zero.optim
        return local, _FLAT
    return optimizer, StateDictOptions()


def state_dicts(
    model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's and this rank's optimizer state dicts, in the layout DCP saves."""
    local, options = _local(optimizer)
    return get_state_dict(model, local, options=options)


def load_state_dicts(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state: dict[str, Any],
    optim_state: dict[str, Any],
) -> None:
    """Load what :func:`state_dicts` gave (filled in by DCP) into the model and optimizer."""
    local, options = _local(optimizer)
    set_state_dict(
        model, local, model_state_dict=model_state, optim_state_dict=optim_state, options=options
    )


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state (moments, step counts) this rank holds."""
    local, _ = _local(optimizer)
    return sum(
        value.numel() * value.element_size()
        for state in local.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )
