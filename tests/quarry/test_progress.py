"""Progress on stderr: a live bar on a terminal, plain lines into a file or a pipe."""

from __future__ import annotations

import io
import os
import select
from pathlib import Path

import pytest

from quarry import progress as progress_module
from quarry.progress import Progress
from tests.fixtures.stack import run_quarry


def test_into_a_file_it_writes_plain_lines_and_the_final_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress_module, "LINE_EVERY_S", 3600.0)
    out = io.StringIO()
    with Progress("ingest", "episodes", out=out) as hook:
        for done in range(1, 6):
            hook(done, 5)
    lines = out.getvalue().splitlines()
    assert lines == [
        "ingest: 1 episodes of 5 episodes (20%)",  # the first at once, then every LINE_EVERY_S
        "ingest: 5 episodes of 5 episodes (100%)",  # and the last at the end
    ]
    assert "\r" not in out.getvalue()


def test_the_first_line_comes_at_once_on_a_machine_just_booted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """time.monotonic() counts from boot: a machine up for less than LINE_EVERY_S still gets
    its first line at once (seen on a fresh CI machine)."""
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: 1.0)
    out = io.StringIO()
    with Progress("ingest", "episodes", out=out) as hook:
        hook(1, 5)
        hook(2, 5)
    assert out.getvalue().splitlines() == [
        "ingest: 1 episodes of 5 episodes (20%)",
        "ingest: 2 episodes of 5 episodes (40%)",
    ]


def test_bytes_are_shown_scaled() -> None:
    out = io.StringIO()
    with Progress("warm", "B", out=out) as hook:
        hook(1_500_000, 3_000_000)
    assert out.getvalue().splitlines() == ["warm: 1.5 MB of 3.0 MB (50%)"]


def test_disabled_writes_nothing() -> None:
    out = io.StringIO()
    with Progress("ingest", "episodes", enabled=False, out=out) as hook:
        hook(1, 2)
    assert out.getvalue() == ""


def test_on_a_terminal_it_draws_a_bar() -> None:
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        assert tty.isatty()
        with Progress("ingest", "episodes", out=tty) as hook:
            hook(1, 4)
            hook(4, 4)
    drawn = read_all(leader)
    os.close(leader)
    assert "\r" in drawn and "4/4" in drawn


def test_the_cli_writes_lines_when_stderr_is_a_pipe(tmp_path: Path) -> None:
    """``quarry ingest synth`` with stderr captured (a pipe, as in CI): no carriage returns."""
    state = tmp_path / "state"
    run_quarry(state, "up")
    try:
        done = run_quarry(state, "ingest", "synth", "--episodes", "2", "--workers", "1")
    finally:
        run_quarry(state, "down", check=False)
    assert "\r" not in done.stderr
    assert "ingest: 2 episodes of 2 episodes (100%)" in done.stderr.splitlines()


def read_all(fd: int) -> str:
    """Everything written to the terminal whose leader end is ``fd`` (one read may return
    only the first write); the follower end is closed, so reading ends at EIO or silence."""
    chunks: list[bytes] = []
    while select.select([fd], [], [], 1.0)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the follower end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()
