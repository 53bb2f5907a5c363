"""Writes the LeRobot fixture datasets of tests/data/lerobot/ with lerobot's own writer.

Run it inside the peer venv (docs/peers.md):
`benchmarks/peers_bench/run.sh python tests/data/lerobot/write_fixtures.py`.
It writes two small LeRobot v3.0 datasets through `LeRobotDataset.create`, `add_frame`,
`save_episode` and `finalize`, with videos (lerobot's default encoder, AV1 by libsvtav1),
as two robots' shapes:

- `rig2/`: 2 cameras (front, wrist), 96x64 pixels, a 6-dimension state and action, 10 fps,
  3 episodes of 24, 30 and 20 frames with two task strings;
- `rig3/`: 3 cameras (front, left, right), 8-dimension state, 7-dimension action, 10 fps,
  2 episodes of 26 and 22 frames.

Frames are smooth gradients that move with the frame index (so a codec keeps them within a
few grey levels); states and actions are float32 values unique to (episode, frame, dim).
`VERSION.json` records the lerobot and PyAV versions that wrote them. Existing output is
replaced.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
HEIGHT, WIDTH = 64, 96  # pixels; even, as yuv420p needs
FPS = 10  # frames per second


@dataclass(frozen=True)
class Rig:
    """One robot's dataset shape."""

    name: str
    cameras: tuple[str, ...]
    state_dim: int
    action_dim: int
    lengths: tuple[int, ...]  # frames per episode
    tasks: tuple[str, ...]  # one per episode


RIGS = (
    Rig(
        "rig2",
        ("front", "wrist"),
        6,
        6,
        (24, 30, 20),
        ("pick up the red cube", "open the drawer", "pick up the red cube"),
    ),
    Rig("rig3", ("front", "left", "right"), 8, 7, (26, 22), ("stack the blocks", "wipe the table")),
)


def make_frame(camera: int, episode: int, frame: int) -> np.ndarray:
    """One HWC uint8 image: a smooth pattern that drifts with the frame index."""
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    phase = 0.15 * frame + 0.7 * episode + 1.3 * camera
    red = 128 + 80 * np.sin(xs / 17.0 + phase)
    green = 128 + 80 * np.cos(ys / 13.0 - phase)
    blue = 100 + 60 * np.sin((xs + ys) / 23.0 + 0.5 * phase)
    return np.clip(np.stack([red, green, blue], axis=-1), 0, 255).astype(np.uint8)


def make_vector(dim: int, episode: int, frame: int, offset: float) -> np.ndarray:
    """A float32 vector of ``dim`` values unique to (episode, frame, offset)."""
    base = np.sin(np.arange(dim, dtype=np.float64) + 0.1 * frame + episode) + offset
    return base.astype(np.float32)


def features(rig: Rig) -> dict[str, dict[str, Any]]:
    """The features of a rig, as `LeRobotDataset.create` takes them."""
    out: dict[str, dict[str, Any]] = {
        f"observation.images.{camera}": {
            "dtype": "video",
            "shape": (HEIGHT, WIDTH, 3),
            "names": ["height", "width", "channels"],
        }
        for camera in rig.cameras
    }
    out["observation.state"] = {
        "dtype": "float32",
        "shape": (rig.state_dim,),
        "names": [f"joint_{i}" for i in range(rig.state_dim)],
    }
    out["action"] = {
        "dtype": "float32",
        "shape": (rig.action_dim,),
        "names": [f"motor_{i}" for i in range(rig.action_dim)],
    }
    return out


def write_rig(rig: Rig, root: Path) -> None:
    """Write one rig's dataset under ``root`` with lerobot's recorder API."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    shutil.rmtree(root, ignore_errors=True)
    dataset = LeRobotDataset.create(
        repo_id=f"quarry/{rig.name}",
        root=root,
        fps=FPS,
        robot_type=f"quarry_{rig.name}",
        features=features(rig),
        use_videos=True,
    )
    for episode, (length, task) in enumerate(zip(rig.lengths, rig.tasks, strict=True)):
        for frame in range(length):
            item: dict[str, Any] = {
                f"observation.images.{camera}": make_frame(c, episode, frame)
                for c, camera in enumerate(rig.cameras)
            }
            item["observation.state"] = make_vector(rig.state_dim, episode, frame, 0.0)
            item["action"] = make_vector(rig.action_dim, episode, frame, 0.25)
            item["task"] = task
            dataset.add_frame(item)
        dataset.save_episode()
    dataset.finalize()


def main() -> None:
    for rig in RIGS:
        write_rig(rig, HERE / rig.name)
    versions = {name: importlib.metadata.version(name) for name in ("lerobot", "av", "torch")}
    (HERE / "VERSION.json").write_text(json.dumps({"written_by": versions}, indent=2) + "\n")
    print(json.dumps(versions))


if __name__ == "__main__":
    main()
