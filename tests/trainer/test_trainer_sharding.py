"""Optimizer state sharding: scope from the layout; four gloo ranks laid out as two nodes of two,
each scope trained, checkpointed with DCP, reloaded into fresh ranks and trained on."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.config import OptimSection
from trainer.sharding import (
    build_optimizer,
    load_state_dicts,
    optimizer_state_bytes,
    shard_scope,
    state_dicts,
)
from trainer.worker import settle_buckets
from trainer.world import World

RANKS, PER_NODE, STEPS = 4, 2, 3
MODES = ("none", "global", "node")


@pytest.mark.parametrize(
    ("mode", "nodes", "per_node", "scope"),
    [
        ("none", 2, 4, "none"),
        ("global", 1, 1, "none"),  # one rank: nothing to share with
        ("global", 2, 4, "global"),
        ("node", 1, 4, "global"),  # one node: the node is the job
        ("node", 4, 1, "none"),  # one rank per node holds the whole state
        ("node", 2, 4, "node"),
        ("auto", 1, 8, "global"),
        ("auto", 2, 4, "node"),
    ],
)
def test_scope_follows_the_layout(mode: str, nodes: int, per_node: int, scope: str) -> None:
    world = World(world_size=nodes * per_node, local_world_size=per_node, num_nodes=nodes)
    assert shard_scope(mode, world) == scope


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def _fit(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[torch.Tensor]) -> None:
    for batch in batches:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(batch[:, :6]), batch[:, 6:]).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()


def _digest(model: nn.Module) -> str:
    data = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return hashlib.sha256(data).hexdigest()


def _owned(optim_state: dict[str, Any]) -> list[str]:
    """Parameters whose optimizer state a state dict holds (either layout)."""
    nested = optim_state.get("state")
    if isinstance(nested, dict):
        return sorted(nested)
    return sorted(
        {k.removeprefix("state.").rsplit(".", 1)[0] for k in optim_state if k[:6] == "state."}
    )


def _wrap(batch: torch.Tensor) -> DistributedDataParallel:
    """The model in DDP, its buckets settled as the trainer does before the first step."""
    model = DistributedDataParallel(_model())
    settle_buckets(model, lambda: model(batch[:, :6]).sum())
    return model


def _run_scope(world: World, mode: str, folder: Path) -> dict[str, object]:
    """Train 2 x STEPS steps, saving after STEPS; fresh ranks load the save and redo the rest."""
    scope = shard_scope(mode, world)
    gen = torch.Generator().manual_seed(world.rank)
    batches = [torch.randn(4, 9, generator=gen) for _ in range(2 * STEPS)]
    model = _wrap(batches[0])
    optimizer = build_optimizer(model, OptimSection(lr=1e-2), scope, world)
    _fit(model, optimizer, batches[:STEPS])
    model_state, optim_state = state_dicts(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder / mode)
    held = optimizer_state_bytes(optimizer)
    _fit(model, optimizer, batches[STEPS:])
    fresh = _wrap(batches[0])
    fresh_optimizer = build_optimizer(fresh, OptimSection(lr=1e-2), scope, world)
    model_state, optim_state = state_dicts(fresh, fresh_optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=folder / mode)
    load_state_dicts(fresh, fresh_optimizer, state["model"], state["optim"])
    _fit(fresh, fresh_optimizer, batches[STEPS:])
    return {
        "scope": scope,
        "owned": _owned(state["optim"]),
        "state_bytes": held,
        "weights": _digest(model),
        "resumed": _digest(fresh),
    }


def _rank(rank: int, folder: Path) -> None:
    world = World(
        rank=rank,
        world_size=RANKS,
        local_rank=rank % PER_NODE,
        local_world_size=PER_NODE,
        node_rank=rank // PER_NODE,
        num_nodes=RANKS // PER_NODE,
    )
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    init = f"file://{folder / 'rendezvous'}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=RANKS)
    try:
        out = {mode: _run_scope(world, mode, folder) for mode in MODES}
    finally:
        dist.destroy_process_group()
    (folder / f"rank{rank}.json").write_text(json.dumps(out))


def test_sharded_state_is_split_as_scoped_and_resumes_exactly(tmp_path: Path) -> None:
    mp.start_processes(_rank, args=(tmp_path,), nprocs=RANKS, start_method="fork")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(RANKS)]
    params = [name for name, _ in _model().named_parameters()]
    unsharded = ranks[0]["none"]["weights"]
    for mode in MODES:
        got = [r[mode] for r in ranks]
        # every scope trains to the unsharded weights, and a reload continues exactly
        assert {g["weights"] for g in got} == {g["resumed"] for g in got} == {unsharded}, mode
    owned = {mode: [set(r[mode]["owned"]) for r in ranks] for mode in MODES}
    assert all(o == set(params) for o in owned["none"])
    assert set().union(*owned["global"]) == set(params)
    assert sum(len(o) for o in owned["global"]) == len(params)  # each parameter on one rank
    node0, node1 = owned["node"][:PER_NODE], owned["node"][PER_NODE:]
    assert node0 == node1  # replicated across nodes
    assert set().union(*node0) == set(params) and not node0[0] & node0[1]
    full = ranks[0]["none"]["state_bytes"]
    assert sum(r["global"]["state_bytes"] for r in ranks) == full
    assert sum(r["node"]["state_bytes"] for r in ranks[:PER_NODE]) == full
    assert all(0 < r["global"]["state_bytes"] < full / 2 for r in ranks)
