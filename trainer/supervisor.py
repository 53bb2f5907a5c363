"""Run torchrun to its end, unless a worker fails in a way no restart can cure.

torchrun's elastic agent restarts the whole worker group after any failure, up to
``--max-restarts`` times; it has no per-error policy. A preflight refusal (an empty manifest, a
full disk) or a bad setting fails the same way on every attempt, so those restarts only cost
time (about 11 s each here, two ranks) and end in torchrun's ``ChildFailedError`` traceback.

The policy therefore lives beside the agent, in the process that started it:

- each rank that fails writes a failure record (``failures/rank-<r>-attempt-<k>.json``, see
  :mod:`trainer.records`) carrying its error's ``retryable`` flag and the ``launch`` ID this
  supervisor gave torchrun in :data:`LAUNCH_ENV`;
- while torchrun runs, :func:`supervise` polls the run's failure records every monitor
  interval; the first record of *this* launch marked ``retryable: false`` is terminal: the agent
  is stopped (``SIGSTOP``, so that it cannot start another attempt meanwhile), its other
  workers get a few seconds to end on their own, then each worker's process group (torchrun
  starts every worker in a session of its own, so its DataLoader workers go with it) gets
  ``SIGTERM`` and ``SIGKILL`` after a grace period, then the agent ``SIGKILL`` (so it prints
  no traceback).

Why here and not elsewhere: the record is written before the rank exits, on the filesystem
the run's records already need, so nothing depends on timing between the rank, the agent and
the store (a rank that dies before writing is a crash, and crashes are what restarts are for);
it needs no private API of torch's agent (subclassing ``LocalElasticAgent`` would); and it
never touches the rendezvous: on several nodes this node's agent disappears as a crashed node
would, so the other agents carry on without it if the job's minimum allows (a node that fails
preflight must not join). An error that every node meets (an empty manifest, a bad setting)
stops every node's agent the same way. The launch ID keeps one node's supervisor from acting
on another node's records in a shared run folder, and a rerun from acting on an old run's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import psutil

from .records import failure_records
from .world import LAUNCH_ENV

SETTLE_S = 5.0
"""Seconds the other workers get to end (and record why) on their own after a terminal one."""
STOP_GRACE_S = 10.0
"""Seconds the workers get to exit after ``SIGTERM`` before ``SIGKILL``."""


def terminal_failure(run_dir: Path, launch_id: str) -> dict[str, Any] | None:
    """The first failure record of launch ``launch_id`` that no restart can cure, if any."""
    for record in failure_records(run_dir):
        if record.get("launch") == launch_id and record.get("retryable") is False:
            return record
    return None


def supervise(
    command: list[str],
    run_dir: Path,
    launch_id: str,
    poll_s: float,
    output: IO[bytes] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Run ``command`` (torchrun) and return its exit status and the terminal failure record
    that ended it early, if one did.

    :param poll_s: how often to look for a terminal failure record, seconds.
    :param output: where torchrun's stdout and stderr go (default: inherited).
    :param env: torchrun's environment (default: this process's).
    :raises OSError: the command could not be started.
    """
    env = {**(os.environ if env is None else env), LAUNCH_ENV: launch_id}
    stderr = subprocess.STDOUT if output is not None else None
    process = subprocess.Popen(command, env=env, stdout=output, stderr=stderr)
    try:
        return _watch(process, lambda: terminal_failure(run_dir, launch_id), poll_s)
    except BaseException:  # Ctrl-C reached torchrun too: give it time to stop its workers
        _wait_or_stop(process, STOP_GRACE_S)
        raise


def _watch(
    process: subprocess.Popen[bytes],
    terminal: Callable[[], dict[str, Any] | None],
    poll_s: float,
) -> tuple[int, dict[str, Any] | None]:
    while True:
        try:
            return process.wait(timeout=poll_s), None
        except subprocess.TimeoutExpired:
            pass
        record = terminal()
        if record is not None:
            stop_job(process)
            return process.returncode, record


def _wait_or_stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_job(process)


def stop_job(
    process: subprocess.Popen[bytes], settle_s: float = SETTLE_S, grace_s: float = STOP_GRACE_S
) -> None:
    """Stop torchrun's agent and every worker it started, without a restart in between.

    The agent is stopped first; its workers get ``settle_s`` seconds to end on their own (the
    others usually meet the same error and record it too), then ``SIGTERM`` and, after
    ``grace_s`` seconds, ``SIGKILL``; the agent last.
    """
    try:
        agent = psutil.Process(process.pid)
        agent.suspend()
        workers = agent.children()
    except psutil.NoSuchProcess:
        workers = []
    _wait_for(workers, settle_s)
    _signal_groups([w for w in workers if _running(w)], signal.SIGTERM)
    _wait_for(workers, grace_s)
    _signal_groups([w for w in workers if _running(w)], signal.SIGKILL)
    process.kill()
    process.wait()


def _wait_for(workers: list[psutil.Process], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_running(w) for w in workers):
        time.sleep(0.05)


def _signal_groups(workers: list[psutil.Process], signum: signal.Signals) -> None:
    for worker in workers:
        try:
            os.killpg(worker.pid, signum)  # each worker leads a session and group of its own
        except ProcessLookupError:  # not a group leader after all: the worker alone
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.send_signal(signum)


def _running(process: psutil.Process) -> bool:
    """Still running: a worker that exited stays a zombie until the stopped agent goes."""
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
