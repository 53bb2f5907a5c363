"""Pinned rigs and the wire protocol of the peer benchmark (``benchmarks/peers.py``).

Plain Python and numpy only: the Quarry side (``.venv``) and the peer side (``.venv-peers``)
both import it. Each system's reader runs as its own server process
(``serve_quarry.py`` / ``serve_peers.py``); the driver sends one JSON line per measured
block (the system, the loader mode and the (episode, anchor) pairs to read) and gets one
JSON line back (wall seconds, per-sample latencies, CPU seconds, peak RSS).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: Loader modes: one process reads in a loop; a torch DataLoader with 2 workers.
MODES = ("process", "workers")
WORKERS = 2
#: Orders of the (episode, anchor) pairs: Quarry's EpochSampler and a uniform permutation.
ORDERS = ("sampler", "random")
PEERS = ("lerobot_av1", "lerobot_h264", "mds_jpeg")
#: The LeRobot codec of each LeRobot system (lerobot's default is libsvtav1).
LEROBOT_CODECS = {"lerobot_av1": "libsvtav1", "lerobot_h264": "h264"}


@dataclass(frozen=True)
class Rig:
    """One pinned rig: cameras, frame size and rate, corpus size and the sample spec.

    Every stream runs at ``fps`` (cameras, joints, gripper, actions), so a LeRobot frame, an
    MDS row's step and Quarry's control step are the same instant. Sample: ``frames`` frames
    per camera (the last at/before the anchor and the ones before it), ``state_history``
    state steps ending at the anchor, ``action_horizon`` action steps from it; anchors every
    ``anchor_stride`` steps.
    """

    name: str
    cameras: int
    width: int
    height: int
    fps: int
    episodes: int
    duration_s: float
    samples_per_block: int  # (episode, anchor) pairs one system reads per block
    rounds: int  # measured rounds (one more, unmeasured, warms every reader first)
    window_s: float = 2.0
    crf: int = 23  # Quarry's writer defaults (episodes._h264.VideoConfig): CRF, preset, tune
    preset: str = "veryfast"
    tune: str | None = "fastdecode"
    keyframe_s: float | None = None  # Quarry keyframe interval; None = once per window
    jpeg_quality: int = 90
    block: int = 8  # Quarry's sampler order: samples per block (1: the plain shuffle)
    batch: int = 8  # samples per DataLoader batch in the workers mode
    frames: int = 2
    state_history: int = 16
    action_horizon: int = 32
    anchor_stride: int = 5
    seed: int = 0
    camera_names: tuple[str, ...] = field(default=("front", "wrist", "side", "overhead"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (pinned in the benchmark's JSON line)."""
        data = asdict(self)
        data["camera_names"] = list(self.camera_names[: self.cameras])
        return data


RIGS = {
    "A": Rig("A", cameras=2, width=128, height=96, fps=30, episodes=20, duration_s=10.0,
             samples_per_block=120, rounds=4),
    "B": Rig("B", cameras=3, width=320, height=180, fps=15, episodes=16, duration_s=12.0,
             samples_per_block=60, rounds=4),
    "C": Rig("C", cameras=4, width=640, height=480, fps=30, episodes=6, duration_s=8.0,
             samples_per_block=24, rounds=3),
}  # fmt: skip
SMALL = {
    "A": replace(RIGS["A"], episodes=2, duration_s=6.0, samples_per_block=32, rounds=2),
    "B": replace(RIGS["B"], episodes=2, duration_s=8.0, samples_per_block=16, rounds=2),
    "C": replace(RIGS["C"], episodes=1, duration_s=4.0, samples_per_block=8, rounds=2),
}


def rig_from_dict(data: dict[str, Any]) -> Rig:
    """The rig of :meth:`Rig.to_dict`."""
    names = tuple(data.pop("camera_names"))
    return Rig(**data, camera_names=(*names, *Rig.camera_names[len(names) :]))


def proc_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (from /proc; 0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """Peak resident set (VmHWM) of process ``pid``, MB (0 if gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return 0.0


def send(record: dict[str, Any]) -> None:
    """Write one protocol line to stdout."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def dir_bytes(path: str) -> int:
    """Bytes of every file under ``path``."""
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, f)) for f in files)
    return total
