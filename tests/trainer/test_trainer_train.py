"""Training for real: torchrun, two gloo ranks on CPU, the corpus fixture, the manifest server.

These start real worker processes through :func:`trainer.launch.launch_run`, the way
``quarry train`` does, and check what the run leaves behind: the summary, the checkpoints, the
sample log and the failure records.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from trainer.config import load_config
from trainer.errors import ExitCode
from trainer.launch import LaunchResult, launch_run
from trainer.marker import MANIFEST_KEY, checkpoint_id, read_marker

from .conftest import Corpus, ManifestServer

Launch = Callable[..., LaunchResult]

BASE = {
    "loader.batch_size": 8,
    "optim.lr": 3e-3,
    "model.channels": [8, 16],
    "model.embed_dim": 32,
    "model.hidden_dim": 64,
    "data.num_workers": 1,
    "launch.nproc_per_node": 2,
    "launch.max_restarts": 0,
    "launch.monitor_interval_s": 0.2,
    "record_samples": True,
}


@pytest.fixture
def run_job(tmp_path: Path) -> Launch:
    """``run_job(run_name, **settings)``: launch a job in ``tmp_path/state``."""

    def run(run_name: str, **values: Any) -> LaunchResult:
        settings = {**BASE, "state_dir": str(tmp_path / "state"), "run_name": run_name, **values}
        return launch_run(load_config(values=settings), python=sys.executable)

    return run


def final_weights(result: LaunchResult, state_dir: Path) -> dict[str, torch.Tensor]:
    """The model tensors of the run's newest checkpoint (converted from DCP to one file)."""
    steps = sorted((state_dir / "checkpoints" / result.run_name).glob("step-*"))
    target = state_dir / f"{result.run_name}.pt"
    dcp_to_torch_save(steps[-1], target)
    state = torch.load(target, weights_only=False)
    return {k: v for k, v in state["model"].items() if isinstance(v, torch.Tensor)}


def consumed_samples(result: LaunchResult) -> dict[tuple[int, int], list[int]]:
    """(rank, step) -> sample indices, as the last attempt that ran the step consumed them.

    Steps replayed after a restart must consume the same samples as the first time.
    """
    seen: dict[tuple[int, int], tuple[int, list[int]]] = {}
    for path in sorted((result.run_dir / "samples").glob("rank-*.jsonl")):
        rank = int(path.stem.removeprefix("rank-"))
        for line in path.read_text().splitlines():
            record = json.loads(line)
            key = (rank, record["step"])
            if key in seen:
                assert seen[key][1] == record["samples"], f"step replayed differently: {key}"
            if key not in seen or record["attempt"] >= seen[key][0]:
                seen[key] = (record["attempt"], record["samples"])
    return {key: samples for key, (_, samples) in seen.items()}


def test_thin_path_fetches_trains_and_checkpoints(
    corpus: Corpus, manifest_server: ManifestServer, run_job: Launch, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(manifest_server.token)
    result = run_job(
        "thin",
        steps=40,
        **{
            "manifest.id": corpus.manifest_id,
            "manifest.service_url": manifest_server.url,
            "manifest.token_file": str(token),
            "checkpoint.interval": "steps",
            "checkpoint.interval_steps": 15,
            "checkpoint.keep_last": 2,
        },
    )
    assert result.exit_code == 0
    summary = result.summary
    assert summary is not None
    assert manifest_server.requests == 1  # once per node, not once per rank
    assert (summary["steps"], summary["world_size"], summary["manifest"]) == (
        40,
        2,
        corpus.manifest_id,
    )
    assert summary["last_loss_mean"] < 0.7 * summary["first_loss_mean"]
    assert summary["checkpoints"]["saved"] == 3  # steps 15, 30 and the final 40
    assert set(summary["preflight"]) == {"manifest", "cache", "device", "disk", "collective"}
    assert summary["cache"]["misses"] == 0 and summary["cache"]["hits"] > 0  # warmed first
    assert 0 < summary["goodput_fraction"] < 1 and summary["mfu"] > 0
    assert sum(summary["time_s"].values()) <= summary["wall_s"] + 0.5
    steps = sorted(p.name for p in (tmp_path / "state/checkpoints/thin").iterdir())
    assert len(steps) == 2 and steps[-1] == "step-0000000040"  # keep_last=2
    final = tmp_path / "state/checkpoints/thin/step-0000000040"
    marker = read_marker(final)  # what evaluation results link the checkpoint by
    assert marker is not None and marker[MANIFEST_KEY] == corpus.manifest_id
    assert checkpoint_id(final) == "thin/step-0000000040"
    assert (tmp_path / "state/manifests" / f"{corpus.manifest_id}.arrow").is_file()
    prom = (result.run_dir / "metrics" / "rank-0.prom").read_text()
    assert 'quarry_trainer_step{rank="0",run="thin"} 40.0' in prom
    assert "quarry_trainer_goodput_fraction" in prom


def test_failed_preflight_exits_with_its_code_before_joining(
    corpus: Corpus, run_job: Launch, tmp_path: Path
) -> None:
    result = run_job(
        "full-disk",
        steps=5,
        **{"manifest.path": str(corpus.manifest_path), "preflight.min_free_disk_bytes": 1 << 60},
    )
    assert result.exit_code == ExitCode.PREFLIGHT_DISK
    failures = [json.loads(p.read_text()) for p in (result.run_dir / "failures").glob("*.json")]
    assert {f["check"] for f in failures} == {"disk"}
    assert "bytes free where checkpoints go" in failures[0]["message"]
    assert not (tmp_path / "state/checkpoints/full-disk").exists()


@pytest.mark.slow
def test_killed_rank_resumes_to_the_same_samples_and_weights(
    corpus: Corpus, run_job: Launch, tmp_path: Path
) -> None:
    common = {
        "steps": 24,
        "manifest.path": str(corpus.manifest_path),
        "checkpoint.interval": "steps",
        "checkpoint.interval_steps": 6,
        "preflight.warm_cache": False,
    }
    reference = run_job("reference", **common)
    assert reference.exit_code == 0
    faulty = run_job(
        "faulty",
        **common,
        **{
            "launch.max_restarts": 1,
            "faults.kill_rank": 1,
            "faults.kill_at_step": 15,
        },
    )
    assert faulty.exit_code == 0
    assert faulty.summary is not None and faulty.summary["restarts"] == 1
    assert faulty.summary["steps_this_attempt"] < 24  # resumed from a checkpoint, not step 0
    recovery = faulty.summary["recovery"]
    assert recovery["recovery_s"] > 0 and recovery["lost_work_s"] >= 0
    assert faulty.summary["time_s"]["recovery"] > 0
    assert (faulty.run_dir / "faults" / "attempt-0.json").is_file()
    expected = consumed_samples(reference)
    assert len(expected) == 2 * 24
    assert consumed_samples(faulty) == expected
    state_dir = tmp_path / "state"
    reference_weights = final_weights(reference, state_dir)
    faulty_weights = final_weights(faulty, state_dir)
    assert reference_weights.keys() == faulty_weights.keys()
    for name, tensor in reference_weights.items():
        assert torch.equal(tensor, faulty_weights[name]), name


def test_runs_under_an_external_launcher(corpus: Corpus, tmp_path: Path) -> None:
    """Two plain processes with a PyTorchJob's variables (no torchrun, no agent store)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    state = tmp_path / "state"
    args = [
        sys.executable, "-m", "trainer",
        "--manifest-path", str(corpus.manifest_path),
        "--state-dir", str(state),
        "--steps", "6",
        "--run-name", "pytorchjob",
        "loader.batch_size=4",
        "model.channels=[8]",
        "data.num_workers=0",
    ]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "RANK"))}
    procs = [
        subprocess.Popen(
            args,
            env={
                **base,
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": "1",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    summary = json.loads(outputs[0][0].strip().splitlines()[-1])
    assert (summary["steps"], summary["world_size"], summary["nnodes"]) == (6, 2, 2)
    assert outputs[1][0].strip() == ""  # only rank 0 prints the summary
    assert (state / "checkpoints/pytorchjob/step-0000000006/COMMITTED.json").is_file()
