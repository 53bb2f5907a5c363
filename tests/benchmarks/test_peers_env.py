"""The peer venv (benchmarks/peers_bench/, docs/peers.md) builds, and lerobot and
mosaicml-streaming write and read their own formats in it with their own code.

The first run builds .venv-peers/ (a few minutes); with its stamp present setup.sh returns
at once, so the module then takes about as long as the smoke script (~20 s)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "benchmarks" / "peers_bench"
SETUP = PEERS / "setup.sh"
RUN = PEERS / "run.sh"
SMOKE = PEERS / "smoke.py"
VENV = ROOT / ".venv-peers"

# The first use of `peer_venv` builds the venv (minutes), in whichever test comes first.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def pins() -> dict[str, str]:
    """Package name -> pinned version, from requirements.txt."""
    found = re.findall(
        r"^([A-Za-z0-9_.-]+)==(\S+)$", (PEERS / "requirements.txt").read_text(), re.M
    )
    return {name.lower(): version for name, version in found}


def run_in_peers(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(RUN), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.fixture(scope="module")
def peer_venv() -> Path:
    """The peer venv, built by setup.sh if missing or stale (the first build takes minutes)."""
    done = subprocess.run(
        ["bash", str(SETUP)], capture_output=True, text=True, timeout=1500, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(VENV.glob(".setup-*")), "setup.sh left no stamp"
    return VENV


@pytest.fixture(scope="module")
def smoke_record(peer_venv: Path) -> dict[str, Any]:
    done = run_in_peers("python", str(SMOKE))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    record: dict[str, Any] = json.loads(lines[0])
    return record


def test_every_package_is_pinned() -> None:
    lines = [
        line.strip()
        for line in (PEERS / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==\S+", line) for line in lines), lines
    assert pins()["torch"] == "2.13.0"


def test_the_smoke_run_writes_and_reads_both_formats(smoke_record: dict[str, Any]) -> None:
    assert smoke_record["peer_smoke"] == "ok"
    lerobot, mds = smoke_record["lerobot"], smoke_record["mds"]
    assert (lerobot["episodes"], lerobot["frames"]) == (2, 16)
    assert lerobot["vcodec"] == "libsvtav1"  # lerobot's default codec, decoded by torchcodec
    assert 0 <= lerobot["max_frame_error"] < 0.04
    assert mds["samples"] == 12 and mds["shards"] >= 2
    assert 0 <= mds["max_frame_error"] < 0.04
    steps = {"import_s", "lerobot_write_s", "lerobot_layout_s", "lerobot_read_s"}
    assert set(smoke_record["timings_s"]) == steps | {"mds_write_s", "mds_read_s"}
    assert all(seconds >= 0 for seconds in smoke_record["timings_s"].values())


def test_the_smoke_run_reports_the_pinned_versions(smoke_record: dict[str, Any]) -> None:
    pinned = pins()
    versions = smoke_record["versions"]
    assert versions["torch"].split("+")[0] == pinned["torch"]
    for name in ("torchvision", "torchcodec", "av", "lerobot", "datasets", "mosaicml-streaming"):
        assert versions[name].split("+")[0] == pinned[name], name


def test_a_second_setup_is_instant(peer_venv: Path) -> None:
    start = time.monotonic()
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - start < 5
    assert "up to date" in done.stderr


def test_run_keeps_the_hub_offline_and_the_venv_first(peer_venv: Path) -> None:
    done = run_in_peers(
        "python",
        "-c",
        "import os, sys; print(sys.prefix, os.environ['HF_HUB_OFFLINE'], os.environ['HF_HOME'])",
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    prefix, offline, hf_home = done.stdout.split()
    assert Path(prefix) == peer_venv and offline == "1"
    assert Path(hf_home) == peer_venv / "hf-home"


def test_run_without_a_command_is_a_usage_error(peer_venv: Path) -> None:
    done = run_in_peers("--no-setup", timeout=60)
    assert done.returncode == 2
    assert "usage: run.sh" in done.stderr


def test_the_smoke_script_rejects_bad_flags(peer_venv: Path, tmp_path: Path) -> None:
    done = run_in_peers("python", str(SMOKE), "--frames", "11", timeout=120)
    assert done.returncode == 2 and "--frames must be between 1 and 10" in done.stderr
    (tmp_path / "mds").mkdir()
    done = run_in_peers("python", str(SMOKE), "--workdir", str(tmp_path), timeout=120)
    assert done.returncode == 2 and "already holds lerobot/ or mds/" in done.stderr
    assert list((tmp_path / "mds").iterdir()) == []
