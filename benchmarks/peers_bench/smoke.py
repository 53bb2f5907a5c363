"""Proves the peer venv works: lerobot's own writer and reader, mosaicml-streaming's MDS.

Run it inside the peer venv: `benchmarks/peers_bench/run.sh python benchmarks/peers_bench/smoke.py`.
It writes a tiny LeRobot v3.0 dataset (two cameras as video, a state and an action vector)
with `LeRobotDataset.create` / `add_frame` / `save_episode` / `finalize`, reads it back
offline through `LeRobotDataset(repo_id, root=...)` with the default video backend
(torchcodec), then writes and reads a few MDS shards of JPEG frames with `streaming.MDSWriter`
and `streaming.StreamingDataset` (local only). It checks shapes and values and prints one JSON
line: versions and timings (seconds). Any failed check exits 1 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

HEIGHT, WIDTH = 64, 96  # pixels; even, as yuv420p needs
STATE_DIM = 6
FPS = 10  # frames per second
CAMERAS = ("observation.images.front", "observation.images.wrist")
PEERS = ("torch", "torchvision", "torchcodec", "av", "lerobot", "datasets", "mosaicml-streaming")
# Mean absolute error allowed between a decoded frame and the frame written, in [0, 1] units.
# Lossy AV1/JPEG on these smooth frames stays near 0.01; neighbouring frames differ by ~0.08.
MAX_FRAME_ERROR = 0.04


class SmokeCheckError(Exception):
    """A check of the smoke run failed; the message says which and with what values."""


def check(condition: bool, message: str) -> None:
    """Raise `SmokeCheckError(message)` unless `condition` holds."""
    if not condition:
        raise SmokeCheckError(message)


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Record the wall time of the block in `timings[name]`, in seconds."""
    start = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - start, 3)


def make_frame(camera: int, episode: int, frame: int) -> np.ndarray:
    """One HWC uint8 image: a smooth gradient whose brightness steps with the frame index."""
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = 30 + 20 * frame + 10 * episode
    gradient = (xs if camera == 0 else ys) * 40 // max(WIDTH, HEIGHT)
    channels = [base + gradient, base + 40 - gradient, np.full_like(xs, base + 20 * camera)]
    return np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8)


def make_vector(episode: int, frame: int, offset: float) -> np.ndarray:
    """A float32 vector of STATE_DIM values unique to (episode, frame, offset)."""
    return (np.arange(STATE_DIM, dtype=np.float32) + 100 * episode + frame + offset).astype(
        np.float32
    )


def frame_error(decoded: np.ndarray, written: np.ndarray) -> float:
    """Mean absolute difference of two HWC images, in [0, 1] units."""
    return float(np.abs(decoded.astype(np.float32) - written.astype(np.float32)).mean() / 255)


def lerobot_features() -> dict[str, dict[str, Any]]:
    """The features of the tiny dataset, as `LeRobotDataset.create` takes them."""
    features: dict[str, dict[str, Any]] = {
        camera: {
            "dtype": "video",
            "shape": (HEIGHT, WIDTH, 3),
            "names": ["height", "width", "channels"],
        }
        for camera in CAMERAS
    }
    for key in ("observation.state", "action"):
        names = [f"joint_{i}" for i in range(STATE_DIM)]
        features[key] = {"dtype": "float32", "shape": (STATE_DIM,), "names": names}
    return features


def write_lerobot(root: Path, episodes: int, frames: int) -> str:
    """Write the dataset with lerobot's own recorder API; return the codec it encoded with."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset.create(
        repo_id="quarry/peers-smoke",
        root=root,
        fps=FPS,
        features=lerobot_features(),
        use_videos=True,
    )
    for episode in range(episodes):
        for frame in range(frames):
            dataset.add_frame(
                {
                    CAMERAS[0]: make_frame(0, episode, frame),
                    CAMERAS[1]: make_frame(1, episode, frame),
                    "observation.state": make_vector(episode, frame, 0.0),
                    "action": make_vector(episode, frame, 0.5),
                    "task": f"task {episode % 2}",
                }
            )
        dataset.save_episode()
    dataset.finalize()
    return str(dataset.vcodec)


def check_lerobot_layout(root: Path, episodes: int, frames: int) -> None:
    """The files of the v3.0 layout are where lerobot's docs put them."""
    info = json.loads((root / "meta" / "info.json").read_text())
    check(info["codebase_version"] == "v3.0", f"codebase_version {info['codebase_version']}")
    check(info["total_episodes"] == episodes, f"total_episodes {info['total_episodes']}")
    check(info["total_frames"] == episodes * frames, f"total_frames {info['total_frames']}")
    expected = [
        "meta/tasks.parquet",
        "meta/stats.json",
        "meta/episodes/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
        *(f"videos/{camera}/chunk-000/file-000.mp4" for camera in CAMERAS),
    ]
    missing = [path for path in expected if not (root / path).is_file()]
    check(not missing, f"missing from the v3.0 layout: {missing}")


def read_lerobot(root: Path, episodes: int, frames: int) -> dict[str, Any]:
    """Read every frame back through `LeRobotDataset` offline and check it; return facts."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.video_utils import _default_decoder_cache

    dataset = LeRobotDataset("quarry/peers-smoke", root=root)
    check(dataset.video_backend == "torchcodec", f"video backend {dataset.video_backend}")
    check(len(dataset) == episodes * frames, f"{len(dataset)} frames read back")
    worst = 0.0
    for index in range(len(dataset)):
        item = dataset[index]
        episode, frame = int(item["episode_index"]), int(item["frame_index"])
        check((episode, frame) == divmod(index, frames), f"frame {index} is {(episode, frame)}")
        check(abs(float(item["timestamp"]) - frame / FPS) < 1e-6, f"timestamp of {index}")
        check(item["task"] == f"task {episode % 2}", f"task of {index}: {item['task']!r}")
        for key, offset in (("observation.state", 0.0), ("action", 0.5)):
            value = item[key].numpy()
            check(value.shape == (STATE_DIM,), f"{key} shape {value.shape}")
            check(np.array_equal(value, make_vector(episode, frame, offset)), f"{key} of {index}")
        for camera_index, camera in enumerate(CAMERAS):
            image = item[camera]
            check(tuple(image.shape) == (3, HEIGHT, WIDTH), f"{camera} shape {tuple(image.shape)}")
            decoded = (image.permute(1, 2, 0).numpy() * 255).round()
            error = frame_error(decoded, make_frame(camera_index, episode, frame))
            check(error < MAX_FRAME_ERROR, f"{camera} frame {index} differs by {error:.3f}")
            worst = max(worst, error)
    check(_default_decoder_cache.size() > 0, "no video went through torchcodec's decoder")
    return {"frames": len(dataset), "episodes": dataset.num_episodes, "max_frame_error": worst}


def write_mds(out: Path, samples: int) -> None:
    """Write `samples` JPEG frames with their state into MDS shards (small shards: several)."""
    from PIL import Image
    from streaming import MDSWriter

    columns = {"image": "jpeg", "state": f"ndarray:float32:{STATE_DIM}", "frame": "int"}
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 13) as writer:
        for frame in range(samples):
            image = Image.fromarray(make_frame(0, 0, frame % 10))
            writer.write({"image": image, "state": make_vector(0, frame, 0.0), "frame": frame})


def read_mds(out: Path, samples: int) -> dict[str, Any]:
    """Read the shards back through `StreamingDataset` (local, unshuffled) and check them."""
    from streaming import StreamingDataset

    index = json.loads((out / "index.json").read_text())
    dataset = StreamingDataset(local=str(out), shuffle=False, batch_size=1)
    seen = []
    worst = 0.0
    for sample in dataset:
        frame = int(sample["frame"])
        seen.append(frame)
        check(np.array_equal(sample["state"], make_vector(0, frame, 0.0)), f"state of {frame}")
        image = np.asarray(sample["image"])
        check(image.shape == (HEIGHT, WIDTH, 3), f"jpeg shape {image.shape}")
        error = frame_error(image, make_frame(0, 0, frame % 10))
        check(error < MAX_FRAME_ERROR, f"jpeg frame {frame} differs by {error:.3f}")
        worst = max(worst, error)
    check(seen == list(range(samples)), f"MDS samples read back: {seen}")
    return {"samples": len(seen), "shards": len(index["shards"]), "max_frame_error": worst}


def import_peers() -> None:
    """Import both peers (what a script pays before its first sample)."""
    import lerobot.datasets.lerobot_dataset
    import streaming

    check(hasattr(lerobot.datasets.lerobot_dataset, "LeRobotDataset"), "no LeRobotDataset")
    check(hasattr(streaming, "MDSWriter"), "no streaming.MDSWriter")


def versions() -> dict[str, str]:
    """The installed version of each peer package."""
    return {name: importlib.metadata.version(name) for name in PEERS}


def run(workdir: Path, episodes: int, frames: int, samples: int) -> dict[str, Any]:
    """Each step, timed; return the JSON record."""
    timings: dict[str, float] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("import_s", import_peers),
        ("lerobot_write_s", lambda: write_lerobot(workdir / "lerobot", episodes, frames)),
        ("lerobot_layout_s", lambda: check_lerobot_layout(workdir / "lerobot", episodes, frames)),
        ("lerobot_read_s", lambda: read_lerobot(workdir / "lerobot", episodes, frames)),
        ("mds_write_s", lambda: write_mds(workdir / "mds", samples)),
        ("mds_read_s", lambda: read_mds(workdir / "mds", samples)),
    ]
    results: dict[str, Any] = {}
    for name, step in steps:
        with timed(timings, name):
            results[name] = step()
    return {
        "peer_smoke": "ok",
        "versions": versions(),
        "lerobot": {"vcodec": results["lerobot_write_s"], **results["lerobot_read_s"]},
        "mds": results["mds_read_s"],
        "timings_s": timings,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2, help="LeRobot episodes to write")
    parser.add_argument("--frames", type=int, default=8, help="frames per episode (at most 10)")
    parser.add_argument("--samples", type=int, default=12, help="MDS samples to write")
    parser.add_argument("--workdir", type=Path, help="keep the datasets here (default: temp)")
    args = parser.parse_args()
    if not 1 <= args.frames <= 10:
        parser.error("--frames must be between 1 and 10 (frame brightness steps with the index)")
    if args.workdir is not None and any((args.workdir / n).exists() for n in ("lerobot", "mds")):
        parser.error(f"--workdir {args.workdir} already holds lerobot/ or mds/: give an empty one")
    with tempfile.TemporaryDirectory(prefix="peers-smoke-") as temp:
        workdir = args.workdir or Path(temp)
        # datasets caches its Arrow copies of the parquet files; keep them with this run's data.
        os.environ.setdefault("HF_DATASETS_CACHE", str(workdir / "hf-datasets-cache"))
        try:
            record = run(workdir, args.episodes, args.frames, args.samples)
        except SmokeCheckError as failure:
            print(f"peer smoke failed: {failure}", file=sys.stderr)
            return 1
    print(json.dumps(record, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
