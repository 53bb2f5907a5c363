"""Every benchmark still imports and parses its flags, so that moving a module cannot break
one silently (`make bench-small` runs them; this is the quick check in `make test`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert {p.stem for p in BENCHMARKS} >= {
        "cdc",
        "container",
        "curation",
        "ingest",
        "loader",
        "trainer",
    }


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmark_imports_and_shows_its_help(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout and "--small" in done.stdout
