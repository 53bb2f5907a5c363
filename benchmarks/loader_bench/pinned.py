"""Pinned parameters of ``benchmarks/loader.py`` (written into its JSON line)."""

from __future__ import annotations

from dataclasses import dataclass

from episodes.spec import SampleSpec
from manifests import ManifestMeta

MB = 1e6
BUCKET = "quarry-bench"


@dataclass(frozen=True)
class Params:
    manifest_rows: tuple[int, ...]
    json_rows: int
    parquet_max_rows: int  # the Parquet baseline is read whole into memory: capped
    pss_rows: int
    episodes: int
    duration_s: float
    steps: int
    ranks: int = 8
    open_repeats: int = 5
    baseline_repeats: int = 3
    lookups: int = 10_000
    width: int = 128
    height: int = 96
    cameras: tuple[tuple[str, float], ...] = (("front", 30.0), ("wrist", 30.0))
    window_s: float = 1.0
    block_mb: float = 4.0
    hit_passes: int = 3
    sample_reads: int = 200
    batch_size: int = 32
    workers: int = 1
    prefetch_factor: int = 4
    stream_batches: int = 2  # taken off the worker queue by BatchStream's thread, ahead
    warmup_steps: int = 10  # until the prefetch queue is full and the readers are open
    model_threads: int = 1
    model_channels: tuple[int, ...] = (64, 128, 256, 256)
    seed: int = 0


FULL = Params(
    manifest_rows=(1_000_000, 10_000_000, 43_000_000),
    json_rows=1_000_000,
    parquet_max_rows=10_000_000,
    pss_rows=10_000_000,
    episodes=8,
    duration_s=30.0,
    steps=40,
)
SMALL = Params(
    manifest_rows=(10_000, 1_000_000),
    json_rows=100_000,
    parquet_max_rows=1_000_000,
    pss_rows=200_000,
    episodes=3,
    duration_s=14.0,
    steps=8,
    open_repeats=3,
    baseline_repeats=1,
    lookups=2_000,
    sample_reads=60,
    warmup_steps=3,
)
SPEC = SampleSpec(frames_per_camera=2, state_history=8, action_horizon=16, anchor_stride=5)
META = ManifestMeta(sql="SELECT * FROM episodes", sample_spec=SPEC.to_dict(), snapshot_id=1)
