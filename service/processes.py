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

from service.errors import StackError


@dataclass(frozen=True)
class Daemon:
    """A ``quarry`` subcommand run detached from the terminal, logging to ``log``."""

    name: str
    args: tuple[str, ...]
    log: Path

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "service.cli", *self.args]

    def spawn(self) -> int:
        """Start the process in its own session (it outlives ``quarry up``); return its pid."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return process.pid


def is_alive(pid: int | None, marker: str) -> bool:
    """True when ``pid`` runs and its command line contains ``marker`` (guards pid reuse)."""
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return any(marker in part for part in process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


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
