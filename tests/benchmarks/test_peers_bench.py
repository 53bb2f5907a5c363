"""benchmarks/peers.py: --help, and one tiny rig-A run whose JSON line has the documented shape.

The run writes one 2 s episode with Quarry's writer (a keyframe every 0.2 s, and once per
window as a frontier point), lerobot's (AV1 and H.264) and MDS's, and reads a few samples
per block through each system's own dataset class in one process and with 2 DataLoader
workers, both orders (the sampler's in blocks of 4), one measured round. It needs the peer
venv (built by ``setup.sh`` if missing, minutes the first time). Figures are not asserted
(they belong to the benchmark), only that every system, order and mode has them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "peers.py"
SYSTEMS = ("quarry", "quarry_kfwindow", "lerobot_av1", "lerobot_h264", "mds_jpeg")
FIGURES = {"samples_per_s", "ms_p50", "ms_p95", "cpu_ms_per_sample", "peak_rss_mb"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_help_names_the_rigs() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--rig" in done.stdout and "--small" in done.stdout


def test_tiny_rig_a_prints_one_json_line(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        str(SCRIPT),
        "--small",
        "--rig",
        "A",
        "--episodes",
        "1",
        "--duration-s",
        "2",
    ]
    argv += ["--samples", "6", "--rounds", "1", "--workdir", str(tmp_path)]
    argv += ["--keyframe-s", "0.2", "--block", "4", "--frontier", "window"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    record = json.loads(lines[0])
    assert record["benchmark"] == "peers" and record["rig"] == "A"
    params = record["params"]
    assert (params["cameras"], params["width"], params["height"], params["fps"]) == (2, 128, 96, 30)
    assert params["sample_spec"]["state_history"] == 16
    assert set(record["bytes"]) == set(SYSTEMS) and all(v > 0 for v in record["bytes"].values())
    for system in SYSTEMS:
        for order in ("sampler", "random"):
            for mode in ("process", "workers"):
                figures = record["results"][system][order][mode]
                assert set(figures) == FIGURES
                assert figures["samples_per_s"] > 0 and figures["peak_rss_mb"] > 0
    for key in ("vs_lerobot", "vs_mds_jpeg", "cpu_vs_lerobot", "cpu_vs_mds_jpeg"):
        assert set(record[key]) == {"sampler", "random"}
        assert set(record[key]["random"]) == {"process", "workers"}
    assert record["bytes_vs_mds_jpeg"] > 0
    assert params["keyframe_s"] == 0.2 and params["block"] == 4
    assert [point["keyframe_s"] for point in record["frontier"]] == [0.2, None]
    # more keyframes cost bytes
    assert record["bytes"]["quarry"] > record["bytes"]["quarry_kfwindow"]
