"""Background daemons: a daemon that dies while starting leaves its output and its cause."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from quarry.stack import processes
from quarry.stack.processes import Daemon


def _wait_status(pid: int, timeout_s: float = 30.0) -> str:
    """The exit status of child ``pid`` once every thread of it has ended."""
    deadline = time.monotonic() + timeout_s
    while (status := processes.exit_status(pid)) is None:
        assert time.monotonic() < deadline, f"process {pid} did not exit"
        time.sleep(0.02)
    return status


def test_exit_status_names_the_signal() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    )
    assert _wait_status(child.pid) == f"killed by {signal.SIGKILL.name}"
    assert not processes.is_alive(child.pid, sys.executable)
    assert processes.exit_status(child.pid) is None  # reaped once; not ours any more


def test_daemon_that_fails_leaves_its_error_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "bad.log"
    pid = Daemon("bad", ("no-such-command", "--state-dir", str(tmp_path)), log).spawn()
    assert _wait_status(pid) == "exit code 2"
    assert processes.exit_status(pid) == "exit code 2"  # read again: still known
    assert "No such command" in log.read_text()


def test_exit_status_of_a_running_or_foreign_process() -> None:
    assert processes.exit_status(1) is None  # not a child of this process
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert processes.exit_status(child.pid) is None
    finally:
        child.kill()
        child.wait()


def test_a_process_in_the_middle_of_exec_is_alive() -> None:
    """Popen returns while the child's exec is still setting up its arguments, when
    ``/proc`` shows an empty command line; that must not read as "exited" (it made ``quarry
    up`` report a daemon that was starting as dead, with an empty log, in ~6% of spawns)."""
    marker = "quarry-exec-window-marker"
    for _ in range(200):
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(30)", marker], start_new_session=True
        )
        try:
            assert processes.is_alive(child.pid, marker)
        finally:
            child.kill()
            child.wait()
        assert not processes.is_alive(child.pid, marker)
