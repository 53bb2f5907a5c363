"""The command line's one error boundary: an expected error is one line and its exit code;
``quarry --debug`` shows the traceback instead; ``python -m quarry`` is the same program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.stack import QUARRY, run_quarry


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


def test_the_state_folder_is_found_in_a_parent(tmp_path: Path) -> None:
    """Without --state-dir or QUARRY_STATE_DIR, the nearest .quarry/ holding a stack, here or
    above, is the state folder (as the notebook finds it); elsewhere it is ./.quarry."""
    state = tmp_path / "project" / ".quarry"
    state.mkdir(parents=True)
    (state / "stack.json").write_text("{}")
    deep = tmp_path / "project" / "notebooks" / "week1"
    deep.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}

    def cache_root(cwd: Path, *extra: str) -> str:
        done = subprocess.run(
            [QUARRY, "cache", "status", "--json", *extra],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return str(json.loads(done.stdout)["root"])

    assert cache_root(deep) == str(state.resolve() / "cache")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert cache_root(elsewhere) == str(elsewhere.resolve() / ".quarry" / "cache")
    other = tmp_path / "other"
    assert cache_root(deep, "--state-dir", str(other)) == str(other.resolve() / "cache")
