"""The torchrun wrapper: its command line, and exit codes that survive torchrun."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from trainer.config import load_config
from trainer.errors import ExitCode, LaunchError
from trainer.launch import exit_status, launch_run, torchrun_command, with_run_name
from trainer.records import write_json


def test_single_node_runs_standalone(tmp_path: Path) -> None:
    config = with_run_name(load_config(values={"state_dir": str(tmp_path)}))
    assert config.run_name is not None and config.run_name.startswith("run-")
    command = torchrun_command(config, tmp_path / "c.json", "python")
    assert command[:3] == ["python", "-m", "torch.distributed.run"]
    assert "--standalone" in command
    assert command[-4:] == ["-m", "trainer", "--config", str(tmp_path / "c.json")]
    assert command[command.index("--nproc-per-node") + 1] == "2"
    assert command[command.index("--max-restarts") + 1] == "3"


def test_several_nodes_need_a_rendezvous(tmp_path: Path) -> None:
    config = load_config(values={"run_name": "r1", "launch.nnodes": "4"})
    with pytest.raises(LaunchError):
        torchrun_command(config, tmp_path / "c.json", "python")
    with pytest.raises(LaunchError, match="run_name"):  # each node would make up its own
        with_run_name(load_config(values={"launch.nnodes": "2", "launch.rdzv_endpoint": "h:1"}))
    config = load_config(
        values={
            "run_name": "r1",
            "launch.nnodes": "2:4",
            "launch.rdzv_endpoint": "head:29400",
            "launch.node_rank": 1,
        }
    )
    command = torchrun_command(config, tmp_path / "c.json", "python")
    assert command[command.index("--rdzv-endpoint") + 1] == "head:29400"
    assert command[command.index("--rdzv-id") + 1] == "r1"
    assert command[command.index("--nnodes") + 1] == "2:4"


def test_exit_status_takes_the_last_attempts_first_failure(tmp_path: Path) -> None:
    now = time.time()
    folder = tmp_path / "failures"
    write_json(folder / "a.json", {"attempt": 0, "wall": now + 1, "exit_code": 1})
    write_json(folder / "b.json", {"attempt": 1, "wall": now + 3, "exit_code": 65})
    write_json(folder / "c.json", {"attempt": 1, "wall": now + 2, "exit_code": 72})
    write_json(folder / "old.json", {"attempt": 5, "wall": now - 100, "exit_code": 99})
    assert exit_status(1, tmp_path, since_wall=now) == 72
    assert exit_status(1, tmp_path / "nothing", since_wall=now) == 1
    assert exit_status(0, tmp_path, since_wall=now) == 0


def test_a_failing_worker_exit_code_comes_through_torchrun(tmp_path: Path) -> None:
    config = load_config(
        values={
            "state_dir": str(tmp_path),
            "manifest.path": str(tmp_path / "missing.arrow"),
            "launch.nproc_per_node": 2,
            "launch.max_restarts": 0,
        }
    )
    result = launch_run(config, python=sys.executable)
    assert result.exit_code == ExitCode.MANIFEST
    records = list((result.run_dir / "failures").glob("*.json"))
    assert len(records) == 2
    record = json.loads(records[0].read_text())
    assert record["error"] == "ManifestFetchError" and "no manifest file" in record["message"]
    assert (result.run_dir / "config.json").stat().st_mode & 0o777 == 0o600
