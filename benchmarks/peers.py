"""Peer benchmark: Quarry against LeRobot (``LeRobotDataset``) and MosaicML Streaming (MDS).

The same synthetic episodes (every stream at the rig's rate) are written by Quarry's writer,
by lerobot's own writer (its default codec, AV1, and H.264) and as MDS shards of JPEG frames
by streaming's own writer. Every system then reads the same (episode, anchor) pairs through
its own dataset class (Quarry's ``ManifestDataset``, ``LeRobotDataset`` with torchcodec,
``StreamingDataset``), each in a server process of its own (the peers in the peer venv,
``benchmarks/peers_bench/run.sh``): in one process and through a torch DataLoader with 2
workers, in Quarry's ``EpochSampler`` order and in a uniformly random order. Systems take
turns block by block in a rotating order, round by round (the first round warms every reader
and is not measured), so load from other processes lands on every system alike. Prints one
JSON line per rig; the ratios are what count on a shared machine.

    python benchmarks/peers.py [--small] [--rig A|B|C ...] [--keyframe-s S] [--block B]
                               [--frontier window,S2@CRF/TUNE,...] [--peer-cache DIR]

``--keyframe-s`` sets Quarry's keyframe interval, ``--block`` Quarry's sampler order (the
block order, which every system then reads; each rig pins 8, the loader's default),
``--frontier`` more Quarry containers with other keyframe intervals and CRFs read side by
side (their bytes and ratios in ``frontier``), ``--peer-cache`` keeps the peers' datasets for
later runs of the same episodes (their writers take most of a full run). See
docs/benchmarks.md.

The peer venv is built on first use (``benchmarks/peers_bench/setup.sh``, minutes; docs/peers.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

# benchmarks/ holds loader.py, which would shadow the loader package: the helpers' folder
# takes its place on the path.
sys.path[0] = str(Path(__file__).resolve().parent / "peers_bench")
from rigs import MODES, ORDERS, PEERS, RIGS, SMALL, Rig, dir_bytes  # noqa: E402

from episodes._h264 import VideoConfig  # noqa: E402
from episodes.episode import EpisodeData  # noqa: E402
from episodes.spec import SampleSpec  # noqa: E402
from episodes.synth import FleetConfig, synth_episode  # noqa: E402
from episodes.writer import WriteOptions, write_episode  # noqa: E402
from loader.sampler import EpochSampler  # noqa: E402
from manifests import ManifestMeta, build_manifest, open_manifest  # noqa: E402

HERE = Path(__file__).parent / "peers_bench"
ROOT = Path(__file__).resolve().parent.parent
STATE_TOPICS = ("/state/joint_positions", "/state/joint_velocities", "/state/gripper")


def sample_spec(rig: Rig) -> SampleSpec:
    """Quarry's spec of the rig's sample (the peers cut the same one)."""
    return SampleSpec(
        control_hz=float(rig.fps),
        frames_per_camera=rig.frames,
        state_history=rig.state_history,
        action_horizon=rig.action_horizon,
        anchor_stride=rig.anchor_stride,
    )


def write_options(rig: Rig) -> WriteOptions:
    """Quarry's writer settings of the rig."""
    video = VideoConfig(
        crf=rig.crf, preset=rig.preset, jpeg_quality=rig.jpeg_quality, tune=rig.tune
    )
    if rig.keyframe_s is not None:  # (the writer before the keyframe interval lacks it)
        video = replace(video, keyframe_s=rig.keyframe_s)
    return WriteOptions(window_s=rig.window_s, video=video)


def make_episode(rig: Rig, index: int) -> EpisodeData:
    """Episode ``index`` of the rig: every stream at ``rig.fps``, no faults."""
    fleet = FleetConfig(
        width=rig.width,
        height=rig.height,
        cameras=tuple((name, float(rig.fps)) for name in rig.camera_names[: rig.cameras]),
        joint_hz=float(rig.fps),
        gripper_hz=float(rig.fps),
        control_hz=float(rig.fps),
        duration_s=(rig.duration_s, rig.duration_s),
        fault_rate=0.0,
    )
    return synth_episode(rig.seed, index, fleet)


def dump_steps(episode: EpisodeData, path: Path) -> int:
    """The episode step by step for the peers' writers (``.npz``); returns its step count."""
    vectors = {v.topic: v.values for v in episode.vectors}
    steps = min([len(c.frames) for c in episode.cameras] + [len(v) for v in vectors.values()])
    arrays = {f"cam{i}": c.frames[:steps] for i, c in enumerate(episode.cameras)}
    arrays["state"] = np.concatenate([vectors[t][:steps] for t in STATE_TOPICS], axis=1)
    arrays["action"] = vectors["/action"][:steps]
    np.savez(path, **arrays)
    return steps


#: A Quarry container setting: keyframe interval (s; None: one per window), CRF, x264 tune.
Point = tuple[float | None, int, str | None]


def variants(rig: Rig, frontier: tuple[Point, ...]) -> dict[str, Point]:
    """Quarry's systems: ``quarry`` (the rig's keyframe interval, CRF and tune) and one per
    frontier point (keyframe ``None``: one only at each window's start, ``quarry_kfwindow``;
    a CRF other than the rig's adds ``_crfN``, another tune ``_<tune>`` or ``_x264``)."""
    named = {}
    for keyframe_s, crf, tune in frontier:
        name = f"quarry_kf{'window' if keyframe_s is None else f'{keyframe_s:g}'}"
        name += "" if crf == rig.crf else f"_crf{crf}"
        name += "" if tune == rig.tune else f"_{tune or 'x264'}"
        named[name] = (keyframe_s, crf, tune)
    return {"quarry": (rig.keyframe_s, rig.crf, rig.tune), **named}


def parse_frontier(text: str, rig: Rig) -> tuple[Point, ...]:
    """``--frontier``: comma-separated ``S`` or ``window``, each optionally ``@CRF`` and
    ``/TUNE`` (``/none``: x264's own), e.g. ``1,window@20/none``."""
    points = []
    for item in filter(None, text.split(",")):
        setting, _, tune = item.partition("/")
        keyframe, _, crf = setting.partition("@")
        points.append(
            (
                None if keyframe == "window" else float(keyframe),
                int(crf or rig.crf),
                (None if tune == "none" else tune) if tune else rig.tune,
            )
        )
    return tuple(points)


def prepare(rig: Rig, data: Path, quarry: dict[str, Point]) -> dict[str, Any]:
    """Write the rig's episodes in Quarry's format (each of ``quarry``'s keyframe intervals,
    ``DATA/<system>/episodes``, with a manifest), and dump them for the peers.

    Returns each Quarry system's global sample offset of every episode, and every episode's
    anchor and step counts."""
    spec = sample_spec(rig)
    (data / "source").mkdir(parents=True)
    for name in quarry:
        for folder in ("episodes", "manifest"):
            (data / name / folder).mkdir(parents=True)
    (data / "rig.json").write_text(json.dumps(rig.to_dict()))
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in quarry}
    steps, write_s = [], 0.0
    for index in range(rig.episodes):
        episode = make_episode(rig, index)
        steps.append(dump_steps(episode, data / "source" / f"episode_{index:03d}.npz"))
        for name, (keyframe_s, crf, tune) in quarry.items():
            path = data / name / "episodes" / f"episode_{index:03d}.mcap"
            start = time.perf_counter()
            options = write_options(replace(rig, keyframe_s=keyframe_s, crf=crf, tune=tune))
            write_episode(episode, path, options)
            write_s += time.perf_counter() - start if name == "quarry" else 0.0
            rows[name].append(manifest_row(episode, path, spec))
        if rows["quarry"][-1]["num_samples"] != -(-steps[-1] // rig.anchor_stride):
            raise SystemExit(f"episode {index}: anchors and steps disagree")
    meta = ManifestMeta(sql="SELECT * FROM episodes", sample_spec=spec.to_dict(), snapshot_id=1)
    offsets = {}
    for name, found in rows.items():
        info = build_manifest(pa.Table.from_pylist(found), meta, data / name / "manifest")
        manifest = open_manifest(info.path)
        by_id = {
            manifest.row(r).episode_id: manifest.row(r).sample_offset for r in range(len(manifest))
        }
        offsets[name] = [by_id[row["episode_id"]] for row in found]
    return {
        "offsets": offsets,
        "anchors": [row["num_samples"] for row in rows["quarry"]],
        "steps": steps,
        "quarry_write_s": round(write_s, 2),
    }


def manifest_row(episode: EpisodeData, path: Path, spec: SampleSpec) -> dict[str, Any]:
    """The manifest row of one written container."""
    return {
        "episode_id": episode.episode_id,
        "uri": path.resolve().as_uri(),
        "start_ns": episode.start_ns,
        "end_ns": episode.end_ns,
        "num_samples": spec.count_samples(episode.start_ns, episode.end_ns),
        "size_bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def orders(rig: Rig, layout: dict[str, Any]) -> dict[str, list[tuple[int, int]]]:
    """(episode, anchor) pairs of each order, as many as the rounds need (wrapping around)."""
    offsets = np.array(layout["offsets"]["quarry"] + [sum(layout["anchors"])], dtype=np.int64)
    order = np.argsort(offsets[:-1])
    row_offsets = np.concatenate([offsets[:-1][order], offsets[-1:]])
    total = int(offsets[-1])
    need = (rig.rounds + 1) * rig.samples_per_block
    extra = {"block": rig.block} if rig.block != 1 else {}  # (the sampler before blocks)
    sampler = EpochSampler(total, row_offsets, seed=rig.seed, **extra).indices()
    random = np.random.default_rng(rig.seed).permutation(total)
    out = {}
    for name, numbers in (("sampler", sampler), ("random", random)):
        numbers = np.resize(numbers, need)
        rows = np.searchsorted(row_offsets, numbers, side="right") - 1
        episodes = order[rows]
        out[name] = [(int(e), int(n - offsets[e])) for e, n in zip(episodes, numbers, strict=True)]
    return out


def keys(system: str, pairs: list[tuple[int, int]], layout: dict[str, Any], rig: Rig) -> list[int]:
    """Each system's own key of each (episode, anchor) pair."""
    if system.startswith("quarry"):
        return [layout["offsets"][system][e] + a for e, a in pairs]
    if system == "mds_jpeg":
        starts = np.concatenate([[0], np.cumsum(layout["anchors"])])
        return [int(starts[e]) + a for e, a in pairs]
    starts = np.concatenate([[0], np.cumsum(layout["steps"])])
    return [int(starts[e]) + a * rig.anchor_stride for e, a in pairs]


class Server:
    """One system's server process and its request/answer lines."""

    def __init__(self, system: str, data: Path, batch: int) -> None:
        self.batch = batch
        if system.startswith("quarry"):
            argv = [sys.executable, str(HERE / "serve_quarry.py"), str(data / system)]
        else:
            argv = [
                str(HERE / "run.sh"),
                "--no-setup",
                "python",
                str(HERE / "serve_peers.py"),
                "serve",
                system,
                str(data),
            ]
        self.system = system
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.system} server ended (exit {self.process.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def request(self, mode: str, keys: list[int]) -> dict[str, Any]:
        stdin: IO[str] | None = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"mode": mode, "keys": keys, "batch": self.batch}) + "\n")
        stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def measure(rig: Rig, data: Path, layout: dict[str, Any], systems: list[str]) -> dict[str, Any]:
    """Every block of every round; the per-system, per-order, per-mode figures."""
    pairs = orders(rig, layout)
    servers = {system: Server(system, data, rig.batch) for system in systems}
    for server in servers.values():  # they start side by side; each says when it is ready
        server.answer()
    blocks: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    try:
        turn = 0
        for round_ in range(rig.rounds + 1):
            for order in ORDERS:
                part = pairs[order][
                    round_ * rig.samples_per_block : (round_ + 1) * rig.samples_per_block
                ]
                for mode in MODES:
                    rotated = systems[turn % len(systems) :] + systems[: turn % len(systems)]
                    turn += 1
                    for system in rotated:
                        answer = servers[system].request(mode, keys(system, part, layout, rig))
                        if round_ > 0:
                            blocks.setdefault((system, order, mode), []).append(answer)
    finally:
        for server in servers.values():
            server.close()
    return {
        system: {
            order: {mode: summarize(blocks[(system, order, mode)]) for mode in MODES}
            for order in ORDERS
        }
        for system in systems
    }


def summarize(answers: list[dict[str, Any]]) -> dict[str, float]:
    latencies = np.concatenate([a["latencies_ms"] for a in answers])
    seconds = sum(a["seconds"] for a in answers)
    return {
        "samples_per_s": round(len(latencies) / seconds, 1),
        "ms_p50": round(float(np.percentile(latencies, 50)), 2),
        "ms_p95": round(float(np.percentile(latencies, 95)), 2),
        "cpu_ms_per_sample": round(sum(a["cpu_s"] for a in answers) * 1e3 / len(latencies), 2),
        "peak_rss_mb": round(max(a["rss_mb"] for a in answers), 1),
    }


def ratios(
    results: dict[str, Any], sizes: dict[str, int], quarry: str = "quarry"
) -> dict[str, Any]:
    """``vs_lerobot`` (against the faster LeRobot codec), ``vs_mds_jpeg`` (samples/s ratios per
    order and mode), ``cpu_vs_lerobot`` and ``cpu_vs_mds_jpeg`` (the peer's CPU ms per sample
    over Quarry's: above 1 means Quarry spends less) and ``bytes_vs_mds_jpeg`` of the Quarry
    system ``quarry``."""

    def ratio(peer: tuple[str, ...]) -> dict[str, dict[str, float]]:
        return {
            order: {
                mode: round(
                    results[quarry][order][mode]["samples_per_s"]
                    / max(results[p][order][mode]["samples_per_s"] for p in peer),
                    2,
                )
                for mode in MODES
            }
            for order in ORDERS
        }

    def cpu_ratio(peer: tuple[str, ...]) -> dict[str, dict[str, float]]:
        return {
            order: {
                mode: round(
                    min(results[p][order][mode]["cpu_ms_per_sample"] for p in peer)
                    / results[quarry][order][mode]["cpu_ms_per_sample"],
                    2,
                )
                for mode in MODES
            }
            for order in ORDERS
        }

    return {
        "vs_lerobot": ratio(("lerobot_av1", "lerobot_h264")),
        "vs_mds_jpeg": ratio(("mds_jpeg",)),
        "cpu_vs_lerobot": cpu_ratio(("lerobot_av1", "lerobot_h264")),
        "cpu_vs_mds_jpeg": cpu_ratio(("mds_jpeg",)),
        "bytes_vs_mds_jpeg": round(sizes[quarry] / sizes["mds_jpeg"], 3),
    }


#: Rig fields the peers' datasets depend on (the others are Quarry's settings or the reads).
PEER_FIELDS = (
    "name", "cameras", "width", "height", "fps", "episodes", "duration_s", "frames",
    "state_history", "action_horizon", "anchor_stride", "seed", "camera_names",
)  # fmt: skip


def write_peers(rig: Rig, data: Path, cache: Path | None) -> dict[str, Any]:
    """The peers' datasets of the rig in ``data``, written by the peers' own writers, or
    copied from ``cache`` where a run of the same episodes wrote them (their writers take
    most of a full run: 25 minutes at rig C). Returns their write seconds (those of the run
    that wrote them) and whether they came from the cache."""
    picked = json.dumps({k: rig.to_dict()[k] for k in PEER_FIELDS}, sort_keys=True)
    stored = (
        cache / f"{rig.name}-{hashlib.sha256(picked.encode()).hexdigest()[:16]}" if cache else None
    )
    if stored is not None and (stored / "write_s.json").exists():
        for system in PEERS:
            shutil.copytree(stored / system, data / system)
        return {**json.loads((stored / "write_s.json").read_text()), "cached": True}
    start = time.perf_counter()
    peer = [str(HERE / "run.sh"), "--no-setup", "python", str(HERE / "serve_peers.py")]
    write = subprocess.run(
        [*peer, "write", str(data)],
        check=True,
        capture_output=True,
        text=True,
    )
    write_s = {
        **json.loads(write.stdout.splitlines()[-1])["write_s"],
        "peers_total": round(time.perf_counter() - start, 2),
    }
    if stored is not None:
        partial = stored.with_name(stored.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for system in PEERS:
            shutil.copytree(data / system, partial / system)
        (partial / "write_s.json").write_text(json.dumps(write_s))
        partial.rename(stored)
    return {**write_s, "cached": False}


def run_rig(
    rig: Rig, data: Path, small: bool, frontier: tuple[Point, ...], cache: Path | None
) -> dict[str, Any]:
    started = time.perf_counter()
    quarry = variants(rig, frontier)
    layout = prepare(rig, data, quarry)
    write_s = {"quarry": layout["quarry_write_s"], **write_peers(rig, data, cache)}
    sizes = {name: dir_bytes(str(data / name / "episodes")) for name in quarry}
    sizes.update({peer: dir_bytes(str(data / peer)) for peer in PEERS})
    results = measure(rig, data, layout, [*quarry, *PEERS])
    return {
        "benchmark": "peers",
        "rig": rig.name,
        "small": small,
        "params": {
            **rig.to_dict(),
            "sample_spec": sample_spec(rig).to_dict(),
            "quarry_video": write_options(rig).video.to_dict(),
            "quarry_keyframe_s": rig.keyframe_s,
            "quarry_loader": {
                "sampler_block": rig.block,
                "decode_threads": "unset: the process's cores in one process, 1 per worker",
                "items": "tensors (ManifestDataset)",
            },
            "lerobot_codecs": {
                "lerobot_av1": "libsvtav1 (lerobot default, g=2, crf=30)",
                "lerobot_h264": "h264 (g=2, crf=30)",
            },
            "mds": "one row per sample, jpeg columns (PIL default quality)",
            "workers": 2,
            "workers_batch": rig.batch,
            "orders": list(ORDERS),
            "samples": sum(layout["anchors"]),
        },
        "bytes": sizes,
        "write_s": write_s,
        "results": results,
        **ratios(results, sizes),
        "frontier": [
            {
                "system": name,
                "keyframe_s": keyframe_s,
                "crf": crf,
                "tune": tune,
                **ratios(results, sizes, name),
            }
            for name, (keyframe_s, crf, tune) in quarry.items()
        ],
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small sizes (a few minutes)")
    parser.add_argument("--rig", action="append", choices=sorted(RIGS), help="rig(s); default A B")
    parser.add_argument("--keyframe-s", type=float, help="Quarry keyframe interval, seconds")
    parser.add_argument(
        "--frontier",
        default="",
        help="more Quarry containers read side by side: comma-separated keyframe intervals"
        " (seconds, or 'window' for one per window), each optionally @CRF and /TUNE (x264's"
        " tune, 'none' for its own), e.g. 1,window@20/none",
    )
    parser.add_argument(
        "--block",
        type=int,
        help="Quarry sampler block (1: the plain shuffle; default: the rig's, 8)",
    )
    parser.add_argument("--episodes", type=int, help="override the episodes of each rig")
    parser.add_argument("--duration-s", type=float, help="override the episode length, s")
    parser.add_argument("--samples", type=int, help="override the samples per block")
    parser.add_argument("--rounds", type=int, help="override the measured rounds")
    parser.add_argument("--workdir", type=Path, help="keep the data here (an empty folder)")
    parser.add_argument(
        "--peer-cache",
        type=Path,
        help="keep the peers' datasets here and reuse them in runs of the same episodes",
    )
    args = parser.parse_args()
    subprocess.run([str(HERE / "setup.sh")], check=True, stdout=sys.stderr)
    for name in args.rig or ["A", "B"]:
        rig = (SMALL if args.small else RIGS)[name]
        rig = replace(rig, keyframe_s=args.keyframe_s)
        if args.block:
            rig = replace(rig, block=args.block)
        if args.episodes:
            rig = replace(rig, episodes=args.episodes)
        if args.duration_s:
            rig = replace(rig, duration_s=args.duration_s)
        if args.samples:
            rig = replace(rig, samples_per_block=args.samples)
        if args.rounds:
            rig = replace(rig, rounds=args.rounds)
        with tempfile.TemporaryDirectory(prefix=f"peers-{name}-") as temp:
            data = (args.workdir / name) if args.workdir else Path(temp)
            frontier = parse_frontier(args.frontier, rig)
            record = run_rig(rig, data, args.small, frontier, args.peer_cache)
            print(json.dumps(record, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
