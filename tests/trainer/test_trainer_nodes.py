"""Two nodes on one machine: two torchrun agents meeting on a c10d rendezvous, two ranks each,
the optimizer state sharded within each node (``optim.shard=auto``), one rank killed."""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.config import load_config
from trainer.launch import LaunchResult, launch_run

from .conftest import Corpus
from .test_trainer_train import consumed_samples, final_weights

STEPS = 6
JOB = {
    "steps": STEPS,
    "loader.batch_size": 4,
    "optim.lr": 3e-3,
    "optim.shard": "auto",
    "model.channels": [8],
    "model.embed_dim": 16,
    "model.hidden_dim": 32,
    "data.num_workers": 0,
    "checkpoint.mode": "sync",  # committed before the kill two steps later
    "checkpoint.interval": "steps",
    "checkpoint.interval_steps": 3,
    "preflight.warm_cache": False,
    "launch.nnodes": "2",
    "launch.nproc_per_node": 2,
    "launch.monitor_interval_s": 0.2,
    "record_samples": True,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def two_agents(state: Path, manifest: Path, run_name: str, **values: Any) -> list[LaunchResult]:
    """Start both agents of a 2-node job (threads: each waits on its own torchrun)."""
    settings = {
        **JOB,
        "state_dir": str(state),
        "run_name": run_name,
        "manifest.path": str(manifest),
        "launch.rdzv_endpoint": f"127.0.0.1:{free_port()}",
        **values,
    }
    config = load_config(values=settings)
    results: list[LaunchResult | None] = [None, None]

    def agent(index: int) -> None:
        results[index] = launch_run(config, python=sys.executable)

    threads = [threading.Thread(target=agent, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


@pytest.mark.slow
def test_node_sharded_job_survives_a_killed_rank_exactly(corpus: Corpus, tmp_path: Path) -> None:
    state = tmp_path / "state"
    reference = two_agents(state, corpus.manifest_path, "reference", **{"launch.max_restarts": 0})
    faulty = two_agents(
        state,
        corpus.manifest_path,
        "faulty",
        **{"launch.max_restarts": 1, "faults.kill_rank": 3, "faults.kill_at_step": 5},
    )
    assert [r.exit_code for r in reference + faulty] == [0, 0, 0, 0]
    summary = faulty[0].summary or faulty[1].summary  # rank 0's node wrote it
    assert summary is not None
    assert (summary["world_size"], summary["nnodes"], summary["restarts"]) == (4, 2, 1)
    assert summary["steps_this_attempt"] < STEPS  # resumed from the step-3 checkpoint
    optimizer = summary["optimizer"]
    assert optimizer["shard"] == "node"
    # rank 0 holds part of its node's copy; the two nodes hold one copy each
    assert 0 < optimizer["state_bytes"] < optimizer["state_bytes_all_ranks"] / 2
    expected = consumed_samples(reference[0])
    assert len(expected) == 4 * STEPS and consumed_samples(faulty[0]) == expected
    weights = final_weights(reference[0], state), final_weights(faulty[0], state)
    assert weights[0].keys() == weights[1].keys()
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name
