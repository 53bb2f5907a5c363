"""Reads LeRobot datasets back with lerobot's own `LeRobotDataset`, offline, and compares them.

Run inside the peer venv (docs/peers.md):
`benchmarks/peers_bench/run.sh python tests/data/lerobot/read_back.py EXPORT[=SOURCE]...`.
Prints one JSON line: an object keyed by each EXPORT as given. Always: episodes, frames,
features, fps, tasks and `info.json`'s `quarry` record of EXPORT. With `=SOURCE` (the LeRobot
dataset that was ingested), each exported episode is matched to the source episode with the
same states, and the record adds, per episode, whether states, actions and task are equal,
the lengths, and the PSNR (dB) of every camera's frames against the source's frames as
lerobot decodes them (the lowest frame's). One process for all, so lerobot imports once.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np


def episodes_of(root: Path) -> tuple[Any, list[dict[str, Any]]]:
    """The dataset and, per episode, its frames as arrays (state, action, images, task)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset(f"quarry/{root.name}", root=root)
    out: dict[int, dict[str, Any]] = {}
    cameras = dataset.meta.video_keys
    for index in range(len(dataset)):
        item = dataset[index]
        episode = out.setdefault(
            int(item["episode_index"]),
            {"state": [], "action": [], "task": item["task"], "frames": {c: [] for c in cameras}},
        )
        episode["state"].append(item["observation.state"].numpy())
        episode["action"].append(item["action"].numpy())
        for camera in cameras:
            image = (item[camera].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            episode["frames"][camera].append(image)
    episodes = []
    for key in sorted(out):
        value = out[key]
        value["state"] = np.stack(value["state"])
        value["action"] = np.stack(value["action"])
        value["frames"] = {c: np.stack(f) for c, f in value["frames"].items()}
        episodes.append(value)
    return dataset, episodes


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images, dB (infinite when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def compare(exported: list[dict[str, Any]], source: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for episode in exported:
        match = next(
            (
                i
                for i, s in enumerate(source)
                if s["state"].shape == episode["state"].shape
                and np.array_equal(s["state"], episode["state"])
            ),
            None,
        )
        if match is None:
            rows.append({"source_episode": None, "length": len(episode["state"])})
            continue
        src = source[match]
        worst = {
            camera: min(psnr(a, b) for a, b in zip(frames, src["frames"][camera], strict=True))
            for camera, frames in episode["frames"].items()
        }
        rows.append(
            {
                "source_episode": match,
                "length": len(episode["state"]),
                "source_length": len(src["state"]),
                "states_equal": True,
                "actions_equal": bool(np.array_equal(src["action"], episode["action"])),
                "task": episode["task"],
                "task_equal": episode["task"] == src["task"],
                "min_psnr_db": worst,
            }
        )
    return rows


def describe(export: Path, source: Path | None) -> dict[str, Any]:
    dataset, exported = episodes_of(export)
    record: dict[str, Any] = {
        "episodes": dataset.num_episodes,
        "frames": len(dataset),
        "fps": dataset.fps,
        "cameras": list(dataset.meta.video_keys),
        "state_dim": int(exported[0]["state"].shape[1]),
        "tasks": sorted({e["task"] for e in exported}),
        "lengths": [len(e["state"]) for e in exported],
        "quarry": dataset.meta.info.get("quarry"),
    }
    if source is not None:
        _, original = episodes_of(source)
        record["source_episodes"] = len(original)
        record["compared"] = compare(exported, original)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("pairs", nargs="+", metavar="EXPORT[=SOURCE]")
    args = parser.parse_args()
    out = {}
    for pair in args.pairs:
        export, _, source = pair.partition("=")
        out[pair] = describe(Path(export), Path(source) if source else None)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
