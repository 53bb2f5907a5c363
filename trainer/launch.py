"""Start a training job on this node with torchrun, and report how it ended.

``launch(config)`` writes the settings into the run's folder (mode 0600, secrets included),
runs ``python -m torch.distributed.run ... -m trainer --config <that file>`` and returns the
exit status. torchrun itself exits 1 whatever failed; when a worker left a failure record, the
status is that worker's exit code instead (so a preflight failure stays distinguishable).
A failure the worker marked non-retryable ends the job at once instead of after torchrun's
restarts (:mod:`trainer.supervisor` says how and why).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import TrainerConfig
from .errors import ExitCode, LaunchError
from .records import failure_records, read_json, write_json
from .supervisor import supervise


@dataclass(frozen=True)
class LaunchResult:
    """How a launched job ended.

    :param exit_code: the job's exit status (see :class:`trainer.errors.ExitCode`).
    :param run_name: the run's name (generated when the settings had none).
    :param run_dir: the run's records folder.
    :param summary: the end-of-run summary rank 0 wrote, if it got that far.
    :param failure: the failure record that gave ``exit_code`` (the one that ended the job
        at once when it was not retryable), if a rank left one.
    :param stopped: ``True`` when a non-retryable failure ended the job without restarts.
    """

    exit_code: int
    run_name: str
    run_dir: Path
    summary: dict[str, Any] | None
    failure: dict[str, Any] | None = None
    stopped: bool = False


def new_run_name(now: dt.datetime | None = None) -> str:
    """A fresh run name: UTC time plus 6 random hex digits."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{secrets.token_hex(3)}"


def with_run_name(config: TrainerConfig) -> TrainerConfig:
    """``config`` with ``run_name`` set (a fresh one when it had none).

    :raises LaunchError: a job on several nodes without a name: each node's agent would make
        up its own, and as torchrun's ``--rdzv-id`` the names would never meet.
    """
    if config.run_name is not None:
        return config
    if config.launch.nnodes != "1":
        raise LaunchError("a job on several nodes needs a run_name that every node shares")
    return config.model_copy(update={"run_name": new_run_name()})


def run_dir(config: TrainerConfig) -> Path:
    """The records folder of the run ``config`` names."""
    if config.run_name is None:
        raise LaunchError("the settings name no run (run_name)")
    return config.runs_dir / config.run_name


def torchrun_command(config: TrainerConfig, config_path: Path, python: str) -> list[str]:
    """The torchrun command line that runs ``python -m trainer --config config_path``."""
    launch = config.launch
    command = [
        python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        launch.nnodes,
        "--nproc-per-node",
        str(launch.nproc_per_node),
        "--max-restarts",
        str(launch.max_restarts),
        "--monitor-interval",
        str(launch.monitor_interval_s),
    ]
    if launch.rdzv_endpoint is None:
        if launch.nnodes != "1":
            raise LaunchError("a job on several nodes needs launch.rdzv_endpoint")
        command.append("--standalone")
    else:
        command += [
            "--rdzv-backend",
            launch.rdzv_backend,
            "--rdzv-endpoint",
            launch.rdzv_endpoint,
            "--rdzv-id",
            str(config.run_name),
        ]
        if launch.node_rank is not None:
            command += ["--node-rank", str(launch.node_rank)]
    return [*command, "-m", "trainer", "--config", str(config_path)]


#: Set for the torchrun agents of a job on several nodes (unless already set): torch 2.13's c10d
#: rendezvous otherwise shares its TCP store with the workers, and a node that replaces a lost
#: one never joins: the surviving rank-0 agent keeps its first round's store and never
#: publishes ``MASTER_ADDR`` in the new round, which the new node's agent waits for until it
#: fails (docs/trainer.md).
SHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def agent_environment(
    config: TrainerConfig, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of this node's torchrun agent: ``environ`` (default: this process's),
    with :data:`SHARE_STORE_ENV` set to ``1`` for a job on several nodes unless ``environ``
    already sets it (the user's choice stands)."""
    env = dict(os.environ if environ is None else environ)
    if config.launch.nnodes != "1" and SHARE_STORE_ENV not in env:
        env[SHARE_STORE_ENV] = "1"
    return env


def launch_run(
    config: TrainerConfig, *, python: str | None = None, log_path: Path | None = None
) -> LaunchResult:
    """Run the job to its end; return its exit status, name, folder and summary.

    :param python: the interpreter to run torchrun with (default: this one).
    :param log_path: append torchrun's and the workers' output to this file instead of
        inheriting this process's stdout and stderr.
    :raises LaunchError: torchrun could not be started.
    """
    config = with_run_name(config)
    folder = run_dir(config)
    config_path = folder / "config.json"
    write_json(config_path, json.loads(config.to_json()), mode=0o600)
    started = time.time()
    command = torchrun_command(config, config_path, python or sys.executable)
    launch_id = uuid.uuid4().hex
    poll_s = config.launch.monitor_interval_s
    env = agent_environment(config)
    try:
        if log_path is None:
            returncode, terminal = supervise(command, folder, launch_id, poll_s, env=env)
        else:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with log_path.open("ab") as log:
                returncode, terminal = supervise(command, folder, launch_id, poll_s, log, env)
    except OSError as exc:
        raise LaunchError(f"cannot start torchrun: {exc}") from exc
    summary = read_json(folder / "summary.json") if returncode == 0 else None
    failure = terminal if terminal is not None else final_failure(returncode, folder, started)
    code = int(failure.get("exit_code", returncode)) if failure is not None else returncode
    return LaunchResult(
        exit_code=code,
        run_name=str(config.run_name),
        run_dir=folder,
        summary=summary if isinstance(summary, dict) else None,
        failure=failure,
        stopped=terminal is not None,
    )


def launch(config: TrainerConfig, *, python: str | None = None) -> int:
    """Run the job with torchrun on this node and return its exit status."""
    return launch_run(config, python=python).exit_code


def exit_status(returncode: int, folder: Path, since_wall: float) -> int:
    """torchrun's status, or the worker's exit code when one left a failure record.

    Of the records written since ``since_wall``, the first one of the last attempt is the
    failure that ended the job.
    """
    record = final_failure(returncode, folder, since_wall)
    if record is None:
        return int(ExitCode.OK) if returncode == 0 else returncode
    return int(record.get("exit_code", returncode))


def final_failure(returncode: int, folder: Path, since_wall: float) -> dict[str, Any] | None:
    """The failure record that ended a job torchrun ended with ``returncode`` (none on 0):
    the first one of the last attempt among those written since ``since_wall``."""
    if returncode == 0:
        return None
    records = [r for r in failure_records(folder) if float(r.get("wall", 0.0)) >= since_wall]
    if not records:
        return None
    last_attempt = max(int(r.get("attempt", 0)) for r in records)
    return next(r for r in records if int(r.get("attempt", 0)) == last_attempt)
