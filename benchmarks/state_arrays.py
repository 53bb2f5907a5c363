"""State and action parsing per sample: per-step messages against window arrays (issue 16).

Synthetic episodes (one 32x32 camera, so writing is quick) at three rates: the fleet's
default (joints 100 Hz, gripper and control 50 Hz, the default sample spec), and every stream
at 30 Hz and at 15 Hz with the peer benchmark's sample (16 state steps, a 32-step action
chunk; rigs A and B of ``benchmarks/peers.py``). Each is written in every vector layout the
writer has (``messages``: one message per step plus context copies, the layout before window
arrays; ``arrays``: the same per-step messages plus one array per topic per window), and the
same anchors are read through ``EpisodeReader.read_sample`` with a camera set the episode
lacks, so a sample is its state chunks' reads (I/O, CRC, decompression) and the state and
action parsing and resampling alone. ``parse_ms`` is that CPU time (``time.process_time``,
steadier than wall time on a shared machine) less the CPU of the same chunk reads measured on
their own; ``state_bytes`` sums the state chunks (compressed, with their message index). The
layouts take turns anchor by anchor. Prints one JSON line.

    python benchmarks/state_arrays.py [--small]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import time
from typing import Any

from episodes._index import read_chunk
from episodes.episode import EpisodeData
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec
from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions, write_episode

#: name: (stream rate in Hz or None for the fleet's default rates, sample spec)
RATES: dict[str, tuple[float | None, SampleSpec]] = {
    "default": (None, SampleSpec()),
    "30hz": (30.0, SampleSpec(control_hz=30.0, state_history=16, action_horizon=32)),
    "15hz": (15.0, SampleSpec(control_hz=15.0, state_history=16, action_horizon=32)),
}
#: A camera no episode has: read_sample then reads no frames.
NO_CAMERA = ("/cam/none",)


def layouts() -> dict[str, WriteOptions]:
    """The writer's vector layouts (only ``messages`` before window arrays existed)."""
    fields = {f.name for f in dataclasses.fields(WriteOptions)}
    if "vector_arrays" not in fields:
        return {"messages": WriteOptions()}
    return {
        "messages": WriteOptions(vector_arrays=False),
        "arrays": WriteOptions(vector_arrays=True),
    }


def make_episode(rate: float | None, duration_s: float) -> EpisodeData:
    base = FleetConfig(
        width=32, height=32, cameras=(("front", 30.0),), duration_s=(duration_s, duration_s)
    )
    if rate is not None:
        base = dataclasses.replace(base, joint_hz=rate, gripper_hz=rate, control_hz=rate)
    return synth_episode(0, 0, base, faults=())


def state_chunk_cost(data: bytes) -> tuple[float, int]:
    """CPU seconds of reading every state chunk once, per chunk, and their total bytes."""
    with EpisodeReader(io.BytesIO(data)) as reader:
        state = {t.channel_id for t in reader.info.state_topics()}
        refs = [c for c in reader.info.chunks if c.channel_ids & state]
        started = time.process_time()
        for _ in range(5):
            for ref in refs:
                read_chunk(reader._src, ref)
        per_chunk = (time.process_time() - started) / (5 * len(refs))
    return per_chunk, sum(r.length + r.index_length for r in refs)


def measure(name: str, samples: int, duration_s: float) -> dict[str, Any]:
    rate, spec = RATES[name]
    spec = dataclasses.replace(spec, cameras=NO_CAMERA)
    episode = make_episode(rate, duration_s)
    files = {}
    for layout, options in layouts().items():
        out = io.BytesIO()
        write_episode(episode, out, options)
        files[layout] = out.getvalue()
    anchors = spec.anchors(episode.start_ns, episode.end_ns)
    step = max(1, len(anchors) // samples)
    picked = [int(a) for a in anchors[::step][:samples]]
    readers = {k: EpisodeReader(io.BytesIO(v)) for k, v in files.items()}
    cpu = dict.fromkeys(files, 0.0)
    for turn, anchor in enumerate(picked):
        order = list(files)[turn % len(files) :] + list(files)[: turn % len(files)]
        for layout in order:
            started = time.process_time()
            readers[layout].read_sample(anchor, spec)
            cpu[layout] += time.process_time() - started
    out_row: dict[str, Any] = {"spec": spec.to_dict(), "rate_hz": rate, "samples": len(picked)}
    for layout, data in files.items():
        per_chunk, state_bytes = state_chunk_cost(data)
        reads = readers[layout].chunk_reads / len(picked)
        sample_ms = 1e3 * cpu[layout] / len(picked)
        out_row[layout] = {
            "sample_cpu_ms": round(sample_ms, 3),
            "chunk_reads_per_sample": round(reads, 2),
            "chunk_read_cpu_ms": round(1e3 * per_chunk * reads, 3),
            "parse_ms": round(sample_ms - 1e3 * per_chunk * reads, 3),
            "bytes": len(data),
            "state_bytes": state_bytes,
        }
        readers[layout].close()
    if "arrays" in files:
        out_row["parse_speedup"] = round(
            out_row["messages"]["parse_ms"] / out_row["arrays"]["parse_ms"], 2
        )
        out_row["bytes_ratio"] = round(len(files["arrays"]) / len(files["messages"]), 4)
        out_row["state_bytes_ratio"] = round(
            out_row["arrays"]["state_bytes"] / out_row["messages"]["state_bytes"], 4
        )
    return out_row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI size: fewer samples")
    args = parser.parse_args()
    samples, duration = (60, 8.0) if args.small else (300, 12.0)
    result = {"benchmark": "state_arrays", "small": args.small, "layouts": list(layouts())}
    result["rates"] = {name: measure(name, samples, duration) for name in RATES}
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
