"""The command line's one error boundary: an expected error is one line and its exit code;
``quarry --debug`` shows the traceback instead; ``python -m quarry`` is the same program."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixtures.stack import run_quarry


def test_an_error_is_one_line_and_its_exit_code(tmp_path: Path) -> None:
    done = run_quarry(tmp_path / "none", "curate", "--sql", "SELECT * FROM episodes", check=False)
    assert done.returncode == 3  # StackError: nothing is running in that state folder
    assert done.stderr.strip().splitlines() == [
        f"error: the service URL is not there ({tmp_path / 'none' / 'run' / 'service.url'}); "
        "is the stack up? run `quarry up`"
    ]


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = run_quarry(
        tmp_path / "none", "--debug", "curate", "--sql", "SELECT * FROM episodes", check=False
    )
    assert done.returncode != 0
    assert "Traceback (most recent call last)" in done.stderr
    assert "quarry.errors.StackError: the service URL is not there" in done.stderr


def test_python_dash_m_quarry_is_the_same_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "quarry", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert done.stdout.startswith("Usage: quarry ")
    assert "--debug" in done.stdout and "curate" in done.stdout
