"""Container benchmark: Quarry's grouped layout against per-topic chunks, mcap's default
interleaved 1 MiB chunks, and per-frame JPEG (DESIGN.md, "Performance"; issue 4).

The same synthetic episodes (8 topics: 4 cameras in one group; joint positions, joint
velocities, gripper and actions in the other; textured, noisy frames) are written in each
layout with equal windows. Samples at the same anchors are read locally and through the remote
path: s3fs against moto's S3 server on loopback, files opened without read-ahead, so each
chunk read is one ranged GET. Chunk reads, and the time spent fetching them (the read path's
I/O, CRC and decompression), are measured inside the reader: ``read_speedup`` compares that
fetch time; ``sample_speedup`` compares whole ``read_sample`` calls, which add the H.264
decoding that every layout pays alike. Prints one JSON line.

    python benchmarks/container.py [--small]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import s3fs
from moto.server import ThreadedMotoServer

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
    crf: int = 20
    preset: str = "veryfast"
    jpeg_quality: int = 90
    noise_sigma: float = 2.0
    seed: int = 0


FULL = Params(episodes=6, duration_s=20.0, samples_per_episode=40)
SMALL = Params(episodes=2, duration_s=8.0, samples_per_episode=15)
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
        video = VideoConfig(codec=codec, crf=p.crf, preset=p.preset, jpeg_quality=p.jpeg_quality)
        options = WriteOptions(layout=layout, window_s=p.window_s, video=video)
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


def read_samples(
    readers: list[EpisodeReader], anchors: list[list[int]], spec: SampleSpec
) -> dict[str, float]:
    """Per sample: chunk reads, bytes read, fetch time and whole read time (with decoding)."""
    before = [(r.chunk_reads, r.bytes_read, r.fetch_seconds) for r in readers]
    count, start = 0, time.perf_counter()
    for reader, episode_anchors in zip(readers, anchors, strict=True):
        for anchor in episode_anchors:
            reader.read_sample(anchor, spec)
            count += 1
    elapsed = time.perf_counter() - start
    reads, size, fetch = (
        sum(getattr(r, k) for r in readers) - sum(b[i] for b in before)
        for i, k in enumerate(("chunk_reads", "bytes_read", "fetch_seconds"))
    )
    return {
        "chunk_reads_per_sample": reads / count,
        "bytes_per_sample": size / count,
        "fetch_ms_per_sample": fetch / count * 1e3,
        "sample_ms_per_sample": elapsed / count * 1e3,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def remote_fs() -> tuple[ThreadedMotoServer, s3fs.S3FileSystem]:
    port = free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    fs = s3fs.S3FileSystem(
        key="bench",
        secret="bench",
        skip_instance_cache=True,
        client_kwargs={"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
    )
    fs.call_s3("create_bucket", Bucket="bench")
    return server, fs


def measure_reads(
    p: Params, data: dict[str, list[bytes]], anchors: list[list[int]]
) -> dict[str, dict[str, float]]:
    spec = SampleSpec()
    server, fs = remote_fs()
    figures: dict[str, dict[str, float]] = {}
    try:
        for name in ("grouped", "per_topic", "mcap_default"):
            local = [
                EpisodeReader(io.BytesIO(b), name=f"{name}/{i}") for i, b in enumerate(data[name])
            ]
            local_figures = read_samples(local, anchors, spec)
            files, remote = [], []
            for i, blob in enumerate(data[name]):
                path = f"bench/{name}/{i}.mcap"
                fs.pipe(path, blob)
                files.append(fs.open(path, "rb", cache_type="none"))
                remote.append(EpisodeReader(files[-1], name=f"s3://{path}"))
            remote_figures = read_samples(remote, anchors, spec)
            for f in files:
                f.close()
            assert (
                remote_figures["chunk_reads_per_sample"] == local_figures["chunk_reads_per_sample"]
            )
            figures[name] = {
                "chunk_reads_per_sample": local_figures["chunk_reads_per_sample"],
                "bytes_per_sample": local_figures["bytes_per_sample"],
                "local_sample_ms": local_figures["sample_ms_per_sample"],
                "remote_fetch_ms": remote_figures["fetch_ms_per_sample"],
                "remote_sample_ms": remote_figures["sample_ms_per_sample"],
            }
    finally:
        server.stop()
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
    reads = measure_reads(p, data, anchors)
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
        "sample_speedup": per_topic["remote_sample_ms"] / grouped["remote_sample_ms"],
        "chunk_reads_ratio_vs_default": default["chunk_reads_per_sample"]
        / grouped["chunk_reads_per_sample"],
        "read_speedup_vs_default": default["remote_fetch_ms"] / grouped["remote_fetch_ms"],
        "sample_speedup_vs_default": default["remote_sample_ms"] / grouped["remote_sample_ms"],
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
    args = parser.parse_args()
    print(json.dumps(run(SMALL if args.small else FULL), sort_keys=True))


if __name__ == "__main__":
    main()
