"""The peer side of ``benchmarks/peers.py``: runs inside the peer venv (``run.sh``).

``write DATA`` reads the episodes the driver dumped (``DATA/source/episode_NNN.npz``: every
camera's frames, the state and the action at each step of the rig's rate) and writes them
with each peer's own writer:

- ``DATA/lerobot_av1`` and ``DATA/lerobot_h264``: LeRobot v3.0 datasets through
  ``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` / ``finalize``, lerobot's
  default codec (``libsvtav1``) and ``h264``, its default GOP and CRF;
- ``DATA/mds_jpeg``: MDS shards through ``streaming.MDSWriter``, one row per training sample
  (what a team converting to a plain shard format writes): each camera's sample frames as
  ``jpeg`` columns (streaming's own encoding, PIL's default quality), the state history and
  the action chunk as ``ndarray`` columns.

It prints one JSON line of write seconds. ``serve SYSTEM DATA`` answers the driver's
request lines for one peer system (``blocks.serve``): LeRobot through
``LeRobotDataset(repo_id, root=..., delta_timestamps=...)`` with its default video backend
(torchcodec), MDS through ``StreamingDataset(local=...)`` by sample id.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from blocks import serve
from rigs import LEROBOT_CODECS, Rig, rig_from_dict, send


def load_rig(data: Path) -> Rig:
    return rig_from_dict(json.loads((data / "rig.json").read_text()))


def episodes(data: Path) -> list[Path]:
    return sorted((data / "source").glob("episode_*.npz"))


def load_steps(path: Path) -> dict[str, Any]:
    """An episode's arrays, each read once: an ``NpzFile`` reads an array from the archive
    again at every ``[]`` (per step and camera, that made rig C's writes quadratic)."""
    with np.load(path) as archive:
        return dict(archive)


def camera_keys(rig: Rig) -> list[str]:
    return [f"observation.images.{name}" for name in rig.camera_names[: rig.cameras]]


def write_lerobot(rig: Rig, data: Path, system: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    first = np.load(episodes(data)[0])
    features: dict[str, dict[str, Any]] = {
        key: {
            "dtype": "video",
            "shape": (rig.height, rig.width, 3),
            "names": ["height", "width", "channels"],
        }
        for key in camera_keys(rig)
    }
    for key, name in (("observation.state", "state"), ("action", "action")):
        dims = first[name].shape[1]
        features[key] = {
            "dtype": "float32",
            "shape": (dims,),
            "names": [f"d{i}" for i in range(dims)],
        }
    dataset = LeRobotDataset.create(
        repo_id=f"quarry/peers-{system}",
        root=data / system,
        fps=rig.fps,
        features=features,
        use_videos=True,
        vcodec=LEROBOT_CODECS[system],
    )
    for path in episodes(data):
        ep = load_steps(path)
        for step in range(ep["state"].shape[0]):
            frame: dict[str, Any] = {
                key: ep[f"cam{c}"][step] for c, key in enumerate(camera_keys(rig))
            }
            frame["observation.state"] = ep["state"][step]
            frame["action"] = ep["action"][step]
            frame["task"] = "pick and place"
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()


def sample_rows(rig: Rig, ep: Any) -> list[dict[str, Any]]:
    """One MDS row per anchor of the episode: the same cut as Quarry's sample spec."""
    from PIL import Image

    steps = ep["state"].shape[0]
    rows = []
    for step in range(0, steps, rig.anchor_stride):
        row: dict[str, Any] = {}
        for c in range(rig.cameras):
            for f in range(rig.frames):
                index = max(0, step - (rig.frames - 1 - f))
                row[f"cam{c}_f{f}"] = Image.fromarray(ep[f"cam{c}"][index])
        history = np.clip(np.arange(step - rig.state_history + 1, step + 1), 0, steps - 1)
        horizon = np.clip(np.arange(step, step + rig.action_horizon), 0, steps - 1)
        row["state"] = np.ascontiguousarray(ep["state"][history], dtype=np.float32)
        row["action"] = np.ascontiguousarray(ep["action"][horizon], dtype=np.float32)
        rows.append(row)
    return rows


def write_mds(rig: Rig, data: Path) -> None:
    from streaming import MDSWriter

    first = np.load(episodes(data)[0])
    columns = {f"cam{c}_f{f}": "jpeg" for c in range(rig.cameras) for f in range(rig.frames)}
    columns["state"] = f"ndarray:float32:{rig.state_history},{first['state'].shape[1]}"
    columns["action"] = f"ndarray:float32:{rig.action_horizon},{first['action'].shape[1]}"
    with MDSWriter(out=str(data / "mds_jpeg"), columns=columns) as writer:
        for path in episodes(data):
            for row in sample_rows(rig, load_steps(path)):
                writer.write(row)


def write(data: Path) -> None:
    rig = load_rig(data)
    seconds = {}
    for system in LEROBOT_CODECS:
        start = time.perf_counter()
        write_lerobot(rig, data, system)
        seconds[system] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    write_mds(rig, data)
    seconds["mds_jpeg"] = round(time.perf_counter() - start, 2)
    send({"write_s": seconds})


class ByKey:
    """Map-style access to a StreamingDataset by sample id (so a torch Sampler can drive it)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int) -> Any:
        return self.dataset[key]


def lerobot_dataset(rig: Rig, data: Path, system: str) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    period = 1 / rig.fps
    frames = [-(rig.frames - 1 - f) * period for f in range(rig.frames)]
    deltas = {key: frames for key in camera_keys(rig)}
    deltas["observation.state"] = [
        -(rig.state_history - 1 - i) * period for i in range(rig.state_history)
    ]
    deltas["action"] = [i * period for i in range(rig.action_horizon)]
    dataset = LeRobotDataset(f"quarry/peers-{system}", root=data / system, delta_timestamps=deltas)
    if dataset.video_backend != "torchcodec":
        raise SystemExit(f"lerobot chose video backend {dataset.video_backend}, not torchcodec")
    return dataset


def touch_mds(item: dict[str, Any]) -> None:
    for key, value in item.items():
        if key.startswith("cam"):
            np.asarray(value)  # PIL decodes lazily: the JPEG decode happens here


def clear_torchcodec() -> None:
    """lerobot's caveat: a forked worker must not inherit the parent's open decoders."""
    from lerobot.datasets.video_utils import _default_decoder_cache

    _default_decoder_cache.clear()


def main() -> int:
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "write":
        write(Path(rest[0]))
        return 0
    system, data = rest[0], Path(rest[1])
    rig = load_rig(data)
    if system == "mds_jpeg":
        from streaming import StreamingDataset

        mds = StreamingDataset(local=str(data / system), shuffle=False, batch_size=1)
        serve(ByKey(mds), touch_mds, lambda: None)  # type: ignore[arg-type]
    else:
        serve(lerobot_dataset(rig, data, system), lambda item: None, clear_torchcodec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
