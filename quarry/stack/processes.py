"""Background processes of the embedded stack: start detached, find again, stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from quarry.errors import StackError


@dataclass(frozen=True)
class Daemon:
    """A ``quarry`` subcommand run detached from the terminal, logging to ``log``."""

    name: str
    args: tuple[str, ...]
    log: Path

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "quarry", *self.args]

    def spawn(self) -> int:
        """Start the process in its own session (it outlives ``quarry up``); return its pid.

        Output is unbuffered and a crash in native code (SIGSEGV, SIGBUS, SIGABRT) dumps the
        Python stack into the log, so a daemon that dies while starting always leaves a trace.
        """
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        _spawned[process.pid] = process  # kept, so the exit status stays ours to read
        return process.pid


_spawned: dict[int, subprocess.Popen[bytes]] = {}


# Reads of an empty command line (10 ms apart) before a process counts as not ours.
_EXEC_READS = 50


def is_alive(pid: int | None, marker: str) -> bool:
    """True when ``pid`` runs and its command line contains ``marker`` (guards pid reuse).

    A daemon this process spawned is judged by its own handle. Any other process is read
    from ``/proc``, where a process that is in the middle of ``exec`` shows an empty command
    line for a moment (its new memory is in place, its arguments not yet): that is read
    again rather than taken for a different process.
    """
    if pid is None:
        return False
    if pid in _spawned:
        return _spawned[pid].poll() is None
    try:
        process = psutil.Process(pid)
        for _ in range(_EXEC_READS):
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            cmdline = process.cmdline()
            if cmdline:
                return any(marker in part for part in cmdline)
            time.sleep(0.01)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return False  # no command line at all: a kernel thread, not ours


def exit_status(pid: int) -> str | None:
    """How ``pid`` ended, when it is an exited child of this process ("exit code 1", "killed
    by SIGKILL"); None when it runs, is not our child, or was already reaped."""
    if pid in _spawned:
        code = _spawned[pid].poll()
        if code is None:
            return None
    else:
        try:
            reaped, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if reaped == 0:
            return None
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def terminate(pid: int | None, marker: str, *, timeout_s: float = 15.0) -> None:
    """SIGTERM, wait up to ``timeout_s`` for a clean exit, then SIGKILL."""
    if not is_alive(pid, marker):
        return
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid, marker):
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while is_alive(pid, marker):
        if time.monotonic() > deadline:
            raise StackError(f"process {pid} did not exit after SIGKILL", pid=pid)
        time.sleep(0.05)
