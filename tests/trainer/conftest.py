"""Fixtures for the trainer tests: a real synthetic corpus (MCAP containers and a manifest).

Containers are written by the episodes package (synthetic fleet, real H.264), the manifest by
the manifests package, into a temporary folder once per session. Frames are small and episodes
short so the suite stays quick on two cores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from episodes.ingest import Prepared, store_episode
from episodes.spec import SampleSpec
from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions
from manifests import ManifestMeta, build_manifest
from tests.fixtures.manifest_server import ManifestServer, serve_manifests

FLEET = FleetConfig(
    width=64,
    height=48,
    cameras=(("front", 10.0), ("wrist", 10.0)),
    duration_s=(6.0, 8.0),
    fault_rate=0.0,
)
SPEC = SampleSpec(
    control_hz=50.0, frames_per_camera=2, state_history=4, action_horizon=8, anchor_stride=10
)
SEED = 7


@dataclass(frozen=True)
class Corpus:
    """Containers under ``objects``, and the manifest over them at ``manifest_path``."""

    objects: Path
    manifest_path: Path
    manifest_id: str
    num_samples: int
    spec: SampleSpec = field(default=SPEC)


def norm_stats(prepared: list[Prepared]) -> dict[str, dict[str, object]]:
    """The manifest's normalization statistics: per-dimension sums over all episodes."""
    out: dict[str, dict[str, object]] = {}
    for name in ("state", "action"):
        rows = [s for p in prepared for s in p.stats if s.field == name]
        dims = max(s.dim for s in rows) + 1
        total, squares = np.zeros(dims), np.zeros(dims)
        low, high = np.full(dims, np.inf), np.full(dims, -np.inf)
        counts = np.zeros(dims, dtype=np.int64)
        for s in rows:
            total[s.dim] += s.sum
            squares[s.dim] += s.sum_sq
            counts[s.dim] += s.count
            low[s.dim], high[s.dim] = min(low[s.dim], s.min), max(high[s.dim], s.max)
        out[name] = {  # the service's aggregate: count is the largest per-dimension count
            "count": int(counts.max()),
            "sum": total.tolist(),
            "sum_sq": squares.tolist(),
            "min": low.tolist(),
            "max": high.tolist(),
        }
    return out


def make_corpus(root: Path, episodes: int) -> Corpus:
    """Write ``episodes`` synthetic containers and a manifest over all of them."""
    objects = root / "objects"
    prepared = [
        store_episode(synth_episode(SEED, i, FLEET), objects, WriteOptions())
        for i in range(episodes)
    ]
    records = [p.record for p in prepared]
    starts = np.array([r.start_ns for r in records], dtype=np.int64)
    ends = np.array([r.end_ns for r in records], dtype=np.int64)
    table = pa.table(
        {
            "episode_id": [r.episode_id for r in records],
            "uri": [r.uri for r in records],
            "start_ns": starts,
            "end_ns": ends,
            "num_samples": SPEC.count_samples(starts, ends),
            "size_bytes": [r.size_bytes for r in records],
            "sha256": [r.sha256 for r in records],
            "robot_id": [r.robot_id for r in records],
        }
    )
    meta = ManifestMeta(
        sql="SELECT * FROM episodes", sample_spec=SPEC.to_dict(), norm_stats=norm_stats(prepared)
    )
    info = build_manifest(table, meta, root / "published")
    return Corpus(objects, info.path, info.manifest_id, info.num_samples)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Eight short two-camera episodes and their manifest (shared: tests must not modify it)."""
    return make_corpus(tmp_path_factory.mktemp("corpus"), episodes=8)


@pytest.fixture
def manifest_server(corpus: Corpus) -> Iterator[ManifestServer]:
    """The contract server, serving the corpus manifest, on a free loopback port."""
    with serve_manifests({corpus.manifest_id: corpus.manifest_path.read_bytes()}) as server:
        yield server


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread per test process: the machine's two cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
