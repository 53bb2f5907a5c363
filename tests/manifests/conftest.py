"""Fixtures for the manifests tests: query results shaped like a curation's output."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from manifests import ManifestMeta

TableFactory = Callable[..., pa.Table]


def episode_table(
    num_samples: Sequence[int],
    *,
    slices_per_episode: int = 1,
    extra: bool = True,
    seed: int = 0,
) -> pa.Table:
    """A query result with ``len(num_samples)`` slices, in a shuffled (unsorted) order."""
    n = len(num_samples)
    rng = np.random.default_rng(seed)
    episode = np.arange(n) // slices_per_episode
    part = np.arange(n) % slices_per_episode
    ids = [f"ep-{e:06d}" for e in episode]
    digests = [hashlib.sha256(i.encode()).hexdigest() for i in ids]
    starts = (part * 10_000_000_000).astype(np.int64)
    columns: dict[str, pa.Array] = {
        "episode_id": pa.array(ids, pa.string()),
        "uri": pa.array([f"file:///objects/{i}.mcap" for i in ids], pa.string()),
        "start_ns": pa.array(starts),
        "end_ns": pa.array(starts + 10_000_000_000),
        "num_samples": pa.array(np.asarray(num_samples, dtype=np.int64)),
        "size_bytes": pa.array(np.full(n, 1_000, dtype=np.int64) + episode),
        "sha256": pa.array(digests, pa.string()),
    }
    if extra:
        tasks = pa.array([f"task-{e % 3}" for e in episode], pa.string())
        columns["task"] = tasks.dictionary_encode()
        columns["success"] = pa.array(episode % 2 == 0, pa.bool_())
    table = pa.table(columns)
    return table.take(pa.array(rng.permutation(n))) if n else table


@pytest.fixture
def make_table() -> TableFactory:
    """Factory: ``make_table(num_samples, slices_per_episode=1, extra=True, seed=0)``."""
    return episode_table


@pytest.fixture
def meta() -> ManifestMeta:
    """Metadata of a plain curation at DuckLake snapshot 7."""
    return ManifestMeta(
        sql="SELECT * FROM episodes",
        sample_spec={"control_hz": 50.0, "anchor_stride": 5},
        snapshot_id=7,
        cdc_position={"lsn": 23803720, "lsn_text": "0/16B3748", "slot": "quarry_cdc"},
        norm_stats={
            "state": {"count": 4, "sum": [4.0, 8.0], "sum_sq": [8.0, 20.0]},
            "action": {"count": 2, "sum": [1.0], "sum_sq": [1.0], "min": [0.0], "max": [1.0]},
        },
    )


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """An empty folder to publish manifests into."""
    path = tmp_path / "manifests"
    path.mkdir()
    return path
