"""The torchrun wrapper: its command line, and exit codes that survive torchrun."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pytest

from manifests import ManifestMeta, build_manifest
from trainer.config import load_config
from trainer.errors import ExitCode, LaunchError
from trainer.launch import (
    SHARE_STORE_ENV,
    LaunchResult,
    agent_environment,
    exit_status,
    launch_run,
    torchrun_command,
    with_run_name,
)
from trainer.records import write_json
from trainer.supervisor import supervise, terminal_failure
from trainer.world import LAUNCH_ENV


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


def empty_manifest(folder: Path) -> Path:
    """A manifest with no rows (what a curation that selects nothing builds)."""
    columns = ("episode_id", "uri", "start_ns", "end_ns", "num_samples", "size_bytes", "sha256")
    types = (pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.int64(), pa.string())
    table = pa.table({c: pa.array([], type=t) for c, t in zip(columns, types, strict=True)})
    return build_manifest(table, ManifestMeta(sql="SELECT 1"), folder).path


def failures(result: LaunchResult) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (result.run_dir / "failures").glob("*.json")]


def processes_of(result: LaunchResult) -> list[psutil.Process]:
    """Processes still running with this run's settings file on their command line."""
    marker = str(result.run_dir / "config.json")
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if marker in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def test_a_non_retryable_failure_ends_the_job_without_restarts(tmp_path: Path) -> None:
    config = load_config(
        values={
            "state_dir": str(tmp_path),
            "manifest.path": str(empty_manifest(tmp_path / "m")),
            "launch.nproc_per_node": 2,
        }
    )
    assert config.launch.max_restarts == 3  # the default: torchrun would restart 3 times
    started = time.monotonic()
    result = launch_run(config, python=sys.executable)
    assert result.exit_code == ExitCode.PREFLIGHT_MANIFEST
    assert result.stopped
    assert result.failure is not None and result.failure["message"] == "manifest holds no samples"
    records = failures(result)
    assert records and {r["attempt"] for r in records} == {0}  # no restart was started
    assert all(r["retryable"] is False and r["check"] == "manifest" for r in records)
    assert processes_of(result) == []  # torchrun and its workers are gone
    assert time.monotonic() - started < 60  # four attempts took about 45 s on this machine


def test_a_retryable_failure_is_still_restarted(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = tmp_path / "token"
    token.write_text("t")
    config = load_config(
        values={
            "state_dir": str(tmp_path),
            "manifest.id": "ab" * 32,
            "manifest.service_url": f"http://127.0.0.1:{port}",
            "manifest.token_file": str(token),
            "manifest.attempts": 1,
            "launch.nproc_per_node": 1,
            "launch.max_restarts": 1,
        }
    )
    result = launch_run(config, python=sys.executable)
    assert result.exit_code == ExitCode.MANIFEST
    assert not result.stopped
    records = failures(result)
    assert {r["attempt"] for r in records} == {0, 1}  # the first failure was restarted
    assert all(r["retryable"] is True for r in records)
    assert "cannot reach the service" in records[0]["message"]


def test_only_this_launchs_records_are_terminal(tmp_path: Path) -> None:
    write_json(tmp_path / "failures" / "a.json", {"launch": "other", "retryable": False})
    write_json(tmp_path / "failures" / "b.json", {"launch": "mine", "retryable": True})
    assert terminal_failure(tmp_path, "mine") is None
    write_json(tmp_path / "failures" / "c.json", {"launch": "mine", "retryable": False, "wall": 1})
    assert terminal_failure(tmp_path, "mine") == {"launch": "mine", "retryable": False, "wall": 1}


def test_agents_of_a_multi_node_job_do_not_share_the_rendezvous_store(tmp_path: Path) -> None:
    """torch 2.13 shares the c10d rendezvous store with the workers unless told not to, and
    then a node replacing a lost one never joins (tests/deploy/test_multihost_training.py)."""
    several = load_config(values={"run_name": "r1", "launch.nnodes": "2"})
    one = load_config(values={"run_name": "r1"})
    assert agent_environment(several, {"PATH": "/bin"}) == {"PATH": "/bin", SHARE_STORE_ENV: "1"}
    assert agent_environment(one, {"PATH": "/bin"}) == {"PATH": "/bin"}
    assert agent_environment(several, {SHARE_STORE_ENV: "0"}) == {SHARE_STORE_ENV: "0"}
    # supervise hands the environment to the agent it starts
    out = tmp_path / "env.json"
    code = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    env = agent_environment(several, {"PATH": "/usr/bin:/bin"})
    returncode, _ = supervise([sys.executable, "-c", code], tmp_path, "launch-1", 0.05, env=env)
    seen = json.loads(out.read_text())
    assert returncode == 0 and seen[SHARE_STORE_ENV] == "1" and seen["PATH"] == "/usr/bin:/bin"
    assert seen[LAUNCH_ENV] == "launch-1"
