"""Container benchmark: Quarry's grouped layout against per-topic chunks, mcap's default
interleaved 1 MiB chunks, and per-frame JPEG (DESIGN.md, "Performance"; issue 4).

The same synthetic episodes (8 topics: 4 cameras in one group; joint positions, joint
velocities, gripper and actions in the other; textured, noisy frames) are written in each
layout with equal windows (and, in the grouped and per-topic layouts, the same context of
state and actions around each window, in window arrays: the writer's default). Samples at the
same anchors are read locally and through the remote path: s3fs against moto's S3 server on
loopback (its own process), files opened without read-ahead, so each chunk read is one ranged
GET. Every layout is read by the same ``EpisodeReader.read_sample``; the layouts take turns
sample by sample (in a rotating order), so load from other processes on a shared machine lands
on every layout alike instead of on whichever ran last.

Chunk reads and times are measured inside the reader: ``read_speedup`` compares the fetch
time (I/O, CRC, decompression and parsing of the chunks), ``io_speedup`` the I/O alone,
``read_speedup_median`` the median per-sample fetch times; ``sample_speedup`` compares whole
``read_sample`` calls, which add the H.264 decoding that every layout pays alike. These
compare the layouts' own cost: the reader makes one request per chunk. The remote path is
also read as the reader does by default, planning a sample's chunks and reading those lying
together in one request (``planned_*``; ``requests_per_sample`` counts both): that closes
most of the gap between layouts (a window's per-topic chunks lie together too). Prints one
JSON line.

    python benchmarks/container.py [--small] [--rig C]

``--rig C`` pins rig C of ``benchmarks/peers.py`` (4 cameras at 640x480, 30 fps).
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import s3fs

from episodes._h264 import VideoConfig
from episodes.episode import EpisodeData
from episodes.layouts import Layout
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec
from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions, write_episode

CAMERAS = (("front", 30.0), ("wrist", 30.0), ("side", 30.0), ("overhead", 30.0))
LUMA = np.array([0.299, 0.587, 0.114])


@dataclass(frozen=True)
class Params:
    episodes: int
    duration_s: float
    samples_per_episode: int
    width: int = 128
    height: int = 96
    window_s: float = 2.0
    context_s: float = 0.7  # grouped and per-topic alike; mcap's default layout has none
    crf: int = 20
    preset: str = "veryfast"
    tune: str | None = "fastdecode"  # the writer's default
    jpeg_quality: int = 90
    noise_sigma: float = 2.0
    seed: int = 0


FULL = Params(episodes=6, duration_s=20.0, samples_per_episode=80)
SMALL = Params(episodes=2, duration_s=8.0, samples_per_episode=15)
# Rig C of benchmarks/peers.py (teleop HD): the same 4 cameras at 640x480, 30 fps.
RIG_C = Params(episodes=3, duration_s=10.0, samples_per_episode=30, width=640, height=480)
RIG_C_SMALL = Params(episodes=1, duration_s=6.0, samples_per_episode=10, width=640, height=480)
LAYOUTS = {
    "grouped": (Layout.GROUPED, "h264"),
    "per_topic": (Layout.PER_TOPIC, "h264"),
    "mcap_default": (Layout.INTERLEAVED, "h264"),
    "jpeg": (Layout.GROUPED, "jpeg"),
}


def make_episodes(p: Params) -> list[EpisodeData]:
    config = FleetConfig(
        width=p.width,
        height=p.height,
        cameras=CAMERAS,
        duration_s=(p.duration_s, p.duration_s),
        fault_rate=0.0,
        noise_sigma=p.noise_sigma,
    )
    return [synth_episode(p.seed, i, config) for i in range(p.episodes)]


def encode_all(p: Params, episodes: list[EpisodeData]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for name, (layout, codec) in LAYOUTS.items():
        video = VideoConfig(
            codec=codec, crf=p.crf, preset=p.preset, jpeg_quality=p.jpeg_quality, tune=p.tune
        )
        options = WriteOptions(
            layout=layout, window_s=p.window_s, video=video, context_s=p.context_s
        )
        out[name] = []
        for episode in episodes:
            buffer = io.BytesIO()
            write_episode(episode, buffer, options)
            out[name].append(buffer.getvalue())
    return out


def pick_anchors(p: Params, episodes: list[EpisodeData], spec: SampleSpec) -> list[list[int]]:
    rng = np.random.default_rng(p.seed)
    picks = []
    for ep in episodes:
        anchors = spec.anchors(ep.start_ns, ep.end_ns)
        chosen = rng.choice(anchors, size=min(p.samples_per_episode, len(anchors)), replace=False)
        picks.append(sorted(int(a) for a in chosen))
    return picks


READ_LAYOUTS = ("grouped", "per_topic", "mcap_default")


def read_interleaved(
    readers: dict[str, list[EpisodeReader]], anchors: list[list[int]], spec: SampleSpec
) -> dict[str, dict[str, float]]:
    """Read every sample in every layout, the layouts taking turns sample by sample (in a
    rotating order), so that load from other processes lands on every layout alike.

    Per layout and sample: chunk reads, bytes read, fetch time (inside the reader: I/O, CRC,
    decompression, parsing) and the whole ``read_sample`` time (with H.264 decoding).
    """
    per: dict[str, dict[str, list[float]]] = {
        name: {"reads": [], "bytes": [], "fetch": [], "io": [], "sample": [], "requests": []}
        for name in readers
    }
    names = list(readers)
    turn = 0
    for index, episode_anchors in enumerate(anchors):
        for anchor in episode_anchors:
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                reader = readers[name][index]
                before = _counters(reader)
                start = time.perf_counter()
                reader.read_sample(anchor, spec)
                per[name]["sample"].append(time.perf_counter() - start)
                for key, after, was in zip(
                    ("reads", "bytes", "fetch", "io", "requests"),
                    _counters(reader),
                    before,
                    strict=True,
                ):
                    per[name][key].append(after - was)
            turn += 1
    return {
        name: {
            "chunk_reads_per_sample": float(np.mean(f["reads"])),
            "bytes_per_sample": float(np.mean(f["bytes"])),
            "fetch_ms_per_sample": float(np.mean(f["fetch"])) * 1e3,
            "fetch_ms_median": float(np.median(f["fetch"])) * 1e3,
            "io_ms_per_sample": float(np.mean(f["io"])) * 1e3,
            "sample_ms_per_sample": float(np.mean(f["sample"])) * 1e3,
            "requests_per_sample": float(np.mean(f["requests"])),
        }
        for name, f in per.items()
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoServer:
    """moto's S3 server in its own process on a loopback port.

    Its own process, as a remote store would be: run in a thread of the benchmark instead,
    the server shares the client's interpreter lock, and every request pays lock hand-offs
    between client and server threads that no real store adds.
    """

    def __init__(self) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server process and wait for it."""
        self.process.terminate()
        self.process.wait(timeout=30)


def remote_fs() -> tuple[MotoServer, s3fs.S3FileSystem]:
    """A running S3 server on loopback and an s3fs filesystem with a ``bench`` bucket."""
    server = MotoServer()
    fs = s3fs.S3FileSystem(
        key="bench",
        secret="bench",
        skip_instance_cache=True,
        client_kwargs={
            "endpoint_url": f"http://127.0.0.1:{server.port}",
            "region_name": "us-east-1",
        },
    )
    fs.call_s3("create_bucket", Bucket="bench")
    return server, fs


def _counters(reader: EpisodeReader) -> tuple[float, float, float, float, float]:
    """Chunk reads, bytes read, fetch seconds, I/O seconds and requests so far."""
    return (
        reader.chunk_reads,
        reader.bytes_read,
        reader.fetch_seconds,
        reader.io_seconds,
        reader.requests,
    )


def measure_reads(
    data: dict[str, list[bytes]], anchors: list[list[int]]
) -> dict[str, dict[str, float]]:
    """Chunk reads, bytes and times per sample of each layout, locally and remote: each chunk
    a request of its own (the layouts' own cost), and as the reader plans them by default
    (chunks lying together in one request: ``planned_*``)."""
    spec = SampleSpec()
    local = {
        name: [
            EpisodeReader(io.BytesIO(b), name=f"{name}/{i}", plan_reads=False)
            for i, b in enumerate(data[name])
        ]
        for name in READ_LAYOUTS
    }
    local_figures = read_interleaved(local, anchors, spec)
    server, fs = remote_fs()
    files = []
    try:
        remote: dict[str, list[EpisodeReader]] = {}
        for name in READ_LAYOUTS:
            for i, blob in enumerate(data[name]):
                path = f"bench/{name}/{i}.mcap"
                fs.pipe(path, blob)
                for planned in (False, True):
                    files.append(fs.open(path, "rb", cache_type="none"))
                    reader = EpisodeReader(files[-1], name=f"s3://{path}", plan_reads=planned)
                    remote.setdefault(("planned_" if planned else "") + name, []).append(reader)
        remote_figures = read_interleaved(remote, anchors, spec)
    finally:
        for f in files:
            f.close()
        server.stop()
    figures = {}
    for name in READ_LAYOUTS:
        loc, rem, plan = (
            local_figures[name],
            remote_figures[name],
            remote_figures[f"planned_{name}"],
        )
        assert rem["chunk_reads_per_sample"] == loc["chunk_reads_per_sample"]
        figures[name] = {
            "chunk_reads_per_sample": loc["chunk_reads_per_sample"],
            "bytes_per_sample": loc["bytes_per_sample"],
            "local_fetch_ms": loc["fetch_ms_per_sample"],
            "local_sample_ms": loc["sample_ms_per_sample"],
            "remote_fetch_ms": rem["fetch_ms_per_sample"],
            "remote_fetch_ms_median": rem["fetch_ms_median"],
            "remote_io_ms": rem["io_ms_per_sample"],
            "remote_sample_ms": rem["sample_ms_per_sample"],
            "remote_ms_per_chunk_read": rem["fetch_ms_per_sample"] / rem["chunk_reads_per_sample"],
            "requests_per_sample": rem["requests_per_sample"],
            "planned_requests_per_sample": plan["requests_per_sample"],
            "planned_bytes_per_sample": plan["bytes_per_sample"],
            "planned_remote_fetch_ms": plan["fetch_ms_per_sample"],
            "planned_remote_fetch_ms_median": plan["fetch_ms_median"],
            "planned_remote_sample_ms": plan["sample_ms_per_sample"],
        }
    return figures


def psnr(episodes: list[EpisodeData], blobs: list[bytes]) -> tuple[float, float]:
    """Luma PSNR (BT.601 weights) and RGB PSNR of every decoded frame against its source, dB."""
    luma, rgb = [], []
    for episode, blob in zip(episodes, blobs, strict=True):
        reader = EpisodeReader(io.BytesIO(blob))
        for cam in episode.cameras:
            for header, frame in reader.iter_frames(cam.topic):
                assert frame is not None
                source = cam.frames[header.index].astype(np.float64)
                diff = frame.astype(np.float64) - source
                luma.append(np.mean((diff @ LUMA) ** 2))
                rgb.append(np.mean(diff**2))
    return tuple(float(10 * np.log10(255**2 / np.mean(m))) for m in (luma, rgb))  # type: ignore[return-value]


def run(p: Params) -> dict[str, Any]:
    episodes = make_episodes(p)
    data = encode_all(p, episodes)
    anchors = pick_anchors(p, episodes, SampleSpec())
    reads = measure_reads(data, anchors)
    bytes_h264, bytes_jpeg = sum(map(len, data["grouped"])), sum(map(len, data["jpeg"]))
    psnr_y, psnr_rgb = psnr(episodes, data["grouped"])
    psnr_jpeg_y, _ = psnr(episodes, data["jpeg"])
    grouped, per_topic, default = reads["grouped"], reads["per_topic"], reads["mcap_default"]
    result: dict[str, Any] = {
        "benchmark": "container",
        "params": {**asdict(p), "sample_spec": SampleSpec().to_dict(), "cameras": CAMERAS},
        "layouts": reads,
        "chunk_reads_per_sample": {k: v["chunk_reads_per_sample"] for k, v in reads.items()},
        "chunk_reads_ratio": per_topic["chunk_reads_per_sample"]
        / grouped["chunk_reads_per_sample"],
        "read_speedup": per_topic["remote_fetch_ms"] / grouped["remote_fetch_ms"],
        "read_speedup_median": per_topic["remote_fetch_ms_median"]
        / grouped["remote_fetch_ms_median"],
        "io_speedup": per_topic["remote_io_ms"] / grouped["remote_io_ms"],
        "sample_speedup": per_topic["remote_sample_ms"] / grouped["remote_sample_ms"],
        "chunk_reads_ratio_vs_default": default["chunk_reads_per_sample"]
        / grouped["chunk_reads_per_sample"],
        "read_speedup_vs_default": default["remote_fetch_ms"] / grouped["remote_fetch_ms"],
        "sample_speedup_vs_default": default["remote_sample_ms"] / grouped["remote_sample_ms"],
        "planned_read_speedup": per_topic["planned_remote_fetch_ms"]
        / grouped["planned_remote_fetch_ms"],
        "planned_read_speedup_vs_default": default["planned_remote_fetch_ms"]
        / grouped["planned_remote_fetch_ms"],
        "planned_speedup_vs_per_chunk": grouped["remote_fetch_ms"]
        / grouped["planned_remote_fetch_ms"],
        "bytes_jpeg": bytes_jpeg,
        "bytes_h264": bytes_h264,
        "size_reduction": 1 - bytes_h264 / bytes_jpeg,
        "psnr_db": psnr_y,
        "psnr_rgb_db": psnr_rgb,
        "psnr_jpeg_db": psnr_jpeg_y,
    }
    result["targets_met"] = {
        "chunk_reads_ratio>=3.5": result["chunk_reads_ratio"] >= 3.5,
        "read_speedup>=3": result["read_speedup"] >= 3,
        "size_reduction>=0.68": result["size_reduction"] >= 0.68,
        "psnr_db>=35": result["psnr_db"] >= 35,
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI size: fewer, shorter episodes")
    parser.add_argument(
        "--rig", choices=["default", "C"], default="default", help="C: 640x480 frames (teleop HD)"
    )
    args = parser.parse_args()
    if args.rig == "C":
        params = RIG_C_SMALL if args.small else RIG_C
    else:
        params = SMALL if args.small else FULL
    print(json.dumps({"rig": args.rig, **run(params)}, sort_keys=True))


if __name__ == "__main__":
    main()
