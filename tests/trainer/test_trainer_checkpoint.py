"""Checkpoints: commit marker last, partial checkpoints never loaded, retention, sync and async.

The save/load tests run torch.distributed.checkpoint for real in a world of one (gloo over an
in-memory store); several ranks are covered by the torchrun tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from trainer.checkpoint import COMMIT_NAME, Checkpointer, CheckpointStore
from trainer.config import CheckpointSection
from trainer.errors import CheckpointError
from trainer.rng import capture_rng, restore_rng, seed_everything


def fake_complete(store: CheckpointStore, step: int) -> Path:
    """A step folder as DCP leaves it (metadata present), committed."""
    path = store.step_path(step)
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"m")
    store.commit(step, {"wall": 0.0})
    return path


def test_only_committed_checkpoints_count(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    fake_complete(store, 10)
    partial = store.step_path(20)
    partial.mkdir()
    (partial / ".metadata").write_bytes(b"m")  # DCP finished, marker never written
    no_metadata = store.step_path(30)
    no_metadata.mkdir()
    (no_metadata / COMMIT_NAME).write_text(json.dumps({"step": 30}))  # marker without data
    assert [ref.step for ref in store.committed()] == [10]
    assert store.latest() is not None and store.latest().step == 10  # type: ignore[union-attr]


def test_commit_refuses_a_folder_without_metadata(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.step_path(5).mkdir(parents=True)
    with pytest.raises(CheckpointError):
        store.commit(5, {})


def test_prune_keeps_the_last_k_and_drops_stale_partials(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    for step in (10, 20, 30, 40):
        fake_complete(store, step)
    store.step_path(25).mkdir()  # stale partial: older than the newest complete
    store.step_path(50).mkdir()  # maybe in progress
    removed = store.prune(keep_last=2)
    assert {p.name for p in removed} == {"step-0000000010", "step-0000000020", "step-0000000025"}
    assert [r.step for r in store.committed()] == [30, 40]
    assert store.step_path(50).is_dir()
    store.prune(keep_last=2, keep_partial_above=False)
    assert not store.step_path(50).exists()


@pytest.fixture
def world_of_one() -> Iterator[dist.ProcessGroup]:
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    group = dist.new_group(backend="gloo")
    assert group is not None
    yield group
    dist.destroy_process_group()


def state_of(model: torch.nn.Module, step: int) -> dict[str, object]:
    return {
        "model": model.state_dict(),
        "progress": {"step": torch.tensor(step)},
        "rank0": {"rng": capture_rng(), "sampler": {"epoch": 1, "position": step * 4}},
    }


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_save_commit_and_load_round_trip(
    tmp_path: Path, world_of_one: dist.ProcessGroup, mode: str
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    config = CheckpointSection(mode=mode, keep_last=2)  # type: ignore[arg-type]
    checkpointer = Checkpointer(CheckpointStore(tmp_path), config, world_of_one, coordinator=True)
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.add_(1.0)
        record = checkpointer.save(step, state_of(model, step), {"wall": float(step)})
        assert record.stall_s >= 0
    checkpointer.wait()
    assert [r.step for r in checkpointer.store.committed()] == [2, 3]
    assert all(r.ok and r.write_s is not None for r in checkpointer.records)
    saved = model.weight.detach().clone()
    expected_rng = torch.rand(3)
    with torch.no_grad():
        model.weight.zero_()
    state = state_of(model, 0)
    ref = checkpointer.store.latest()
    assert ref is not None and ref.info["mode"] == mode
    checkpointer.load(ref, state)
    model.load_state_dict(state["model"])  # type: ignore[arg-type]
    restore_rng(state["rank0"]["rng"])  # type: ignore[index]
    assert torch.equal(model.weight, saved)
    assert int(state["progress"]["step"]) == 3  # type: ignore[index]
    assert state["rank0"]["sampler"] == {"epoch": 1, "position": 12}  # type: ignore[index]
    assert torch.equal(torch.rand(3), expected_rng)


def test_async_save_copies_the_state_before_training_moves_on(
    tmp_path: Path, world_of_one: dist.ProcessGroup
) -> None:
    model = torch.nn.Linear(64, 64)
    config = CheckpointSection(mode="async")
    checkpointer = Checkpointer(CheckpointStore(tmp_path), config, world_of_one, coordinator=True)
    saved = model.weight.detach().clone()
    checkpointer.save(1, {"model": model.state_dict()}, {})
    with torch.no_grad():
        model.weight.mul_(-1.0)  # the optimizer moving on while the write runs
    checkpointer.wait()
    state = {"model": model.state_dict()}
    ref = checkpointer.store.latest()
    assert ref is not None
    checkpointer.load(ref, state)
    assert torch.equal(state["model"]["weight"], saved)


def test_rng_capture_and_restore() -> None:
    seed_everything(3)
    state = capture_rng()
    import random

    import numpy as np

    first = (torch.rand(2), np.random.rand(2), random.random())
    restore_rng(state)
    second = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(first[0], second[0])
    assert (first[1] == second[1]).all()
    assert first[2] == second[2]


def test_resume_picks_the_newest_complete_checkpoint_and_clears_partials(
    tmp_path: Path, world_of_one: dist.ProcessGroup
) -> None:
    from trainer.cluster import Cluster
    from trainer.config import load_config
    from trainer.worker import latest_checkpoint
    from trainer.world import World

    store = CheckpointStore(tmp_path)
    fake_complete(store, 10)
    fake_complete(store, 20)
    for step in (15, 30):  # a crash left these half-written
        store.step_path(step).mkdir()
        (store.step_path(step) / "__0_0.distcp").write_bytes(b"partial")
    cluster = Cluster(World(), torch.device("cpu"), "gloo", world_of_one)
    ref = latest_checkpoint(cluster, store, load_config())
    assert ref is not None and ref.step == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000000010", "step-0000000020"]
