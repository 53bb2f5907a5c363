"""torch datasets over real containers, the real cache, and DataLoader worker processes."""

from __future__ import annotations

import gc
import itertools
import os
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from loader import dataset as dataset_module
from loader.config import CacheConfig, LoaderConfig
from loader.dataset import (
    INLINE_BYTES,
    BatchStream,
    ManifestDataset,
    ManifestIterableDataset,
    as_tensors,
    batch_positions,
    collate_samples,
    seed_worker,
)
from loader.errors import BadEpisodeError, LoaderError
from loader.sampler import EpochSampler
from manifests import open_manifest

from .conftest import ACTION_DIMS, STATE_DIMS


def config(tmp_path: Path, **values) -> LoaderConfig:
    return LoaderConfig(cache=CacheConfig(root=tmp_path / "cache"), **values)


def sampler_for(path: Path, **values) -> EpochSampler:
    manifest = open_manifest(path)
    return EpochSampler(manifest.num_samples, manifest.index.row_offsets(), **values)


def test_item_shapes_and_normalization(episode_set, tmp_path: Path) -> None:
    raw = ManifestDataset(episode_set.good, config(tmp_path, normalize=False))
    normed = ManifestDataset(episode_set.good, config(tmp_path))
    item = raw[5]
    assert set(item["frames"]) == {"/cam/front", "/cam/wrist"}
    assert item["frames"]["/cam/front"].shape == (2, 24, 32, 3)
    assert item["frames"]["/cam/front"].dtype == torch.uint8
    assert item["state"].shape == (4, STATE_DIMS) and item["state"].dtype == torch.float32
    assert item["actions"].shape == (8, ACTION_DIMS)
    assert item["sample_index"] == 5
    np.testing.assert_allclose(normed[5]["state"], (item["state"] - 1.0) / 2.0, rtol=1e-6)
    np.testing.assert_allclose(normed[5]["actions"], (item["actions"] - 1.0) / 2.0, rtol=1e-6)


def test_spec_override_changes_the_sample(episode_set, tmp_path: Path) -> None:
    spec = {
        "control_hz": 50.0,
        "frames_per_camera": 3,
        "state_history": 2,
        "action_horizon": 4,
        "anchor_stride": 25,
    }
    item = ManifestDataset(episode_set.good, config(tmp_path, sample_spec=spec))[0]
    assert item["frames"]["/cam/wrist"].shape[0] == 3 and item["actions"].shape[0] == 4


def test_dataset_pickles_the_path_not_the_table(episode_set, tmp_path: Path) -> None:
    dataset = ManifestDataset(episode_set.good, config(tmp_path))
    dataset[0]  # opens the map, the cache and a reader in this process
    data = pickle.dumps(dataset)
    assert len(data) < 4_000
    copy = pickle.loads(data)
    assert copy.source._state is None
    np.testing.assert_array_equal(copy[0]["state"], dataset[0]["state"])


def test_map_style_under_two_workers_covers_the_epoch(episode_set, tmp_path: Path) -> None:
    cfg = config(tmp_path)
    dataset = ManifestDataset(episode_set.good, cfg)
    loader = DataLoader(
        dataset,
        batch_size=4,
        sampler=sampler_for(episode_set.good, seed=3),
        num_workers=2,
        collate_fn=collate_samples,
        worker_init_fn=seed_worker,
    )
    seen = []
    for batch in loader:
        b = batch["sample_index"].shape[0]
        assert batch["frames"]["/cam/front"].shape == (b, 2, 24, 32, 3)
        assert batch["frames"]["/cam/front"].dtype == torch.uint8
        assert batch["state"].shape == (b, 4, STATE_DIMS) and batch["state"].dtype == torch.float32
        assert batch["actions"].shape == (b, 8, ACTION_DIMS)
        assert batch["action_valid"].dtype == torch.bool
        assert batch["sample_index"].dtype == torch.int64
        seen += batch["sample_index"].tolist()
    assert sorted(seen) == list(range(len(dataset)))
    status = dataset.source.process.cache.status()
    assert status.metrics.fills == 4 and status.pinned <= 4  # one download per container


def test_iterable_batches_arrive_in_sampler_order_and_resume(episode_set, tmp_path: Path) -> None:
    cfg = config(tmp_path, batch_size=3)
    sampler = sampler_for(episode_set.good, seed=5, rank=1, world_size=2)
    expected = sampler.indices().tolist()
    dataset = ManifestIterableDataset(episode_set.good, cfg, sampler)
    got = []
    for step, batch in enumerate(DataLoader(dataset, batch_size=None, num_workers=2)):
        got += batch["sample_index"].tolist()
        sampler.mark_consumed(batch_positions(batch))
        if step == 1:
            break
    assert got == expected[:6]
    state = sampler.state_dict()
    resumed = sampler_for(episode_set.good, seed=5, rank=1, world_size=2)
    resumed.load_state_dict(state)
    rest = ManifestIterableDataset(episode_set.good, cfg, resumed)
    for batch in DataLoader(rest, batch_size=None, num_workers=2, worker_init_fn=seed_worker):
        got += batch["sample_index"].tolist()
    assert got == expected


def new_children(before: set[int]) -> list[psutil.Process]:
    """This process's children that were not in ``before`` (the DataLoader's workers)."""
    return [p for p in psutil.Process().children() if p.pid not in before]


def fail_loader(episode_set, tmp_path: Path) -> tuple[DataLoader, list[int]]:
    """Two workers over four samples whose second batch holds a sample of the bad episode."""
    dataset = ManifestDataset(episode_set.with_bad, config(tmp_path))
    manifest = open_manifest(episode_set.with_bad)
    bad_sample = manifest.row(manifest.num_rows - 1).sample_offset
    # The bad episode's samples come last in index order: the second batch holds one.
    order = list(range(bad_sample - 2, bad_sample + 2))
    loader = DataLoader(
        dataset, batch_size=2, sampler=order, num_workers=2, collate_fn=collate_samples
    )
    return loader, order


def test_fail_policy_raises_through_workers(episode_set, tmp_path: Path) -> None:
    loader, order = fail_loader(episode_set, tmp_path)
    before = {p.pid for p in psutil.Process().children()}
    batches = iter(loader)
    workers = new_children(before)
    assert len(workers) == 2
    assert next(batches)["sample_index"].tolist() == order[:2]
    with pytest.raises(BadEpisodeError, match="bad-episode"):
        next(batches)
    started = time.monotonic()
    del batches
    gc.collect()  # the iterator must not be left to the collector (2 x 5 s join timeout)
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive and time.monotonic() - started < 3
    with pytest.raises(BadEpisodeError) as caught:
        loader.dataset[order[-1]]
    copy = pickle.loads(pickle.dumps(caught.value))
    assert copy.episode_id == "bad-episode" and copy.uri.endswith("bad.mcap")


def test_batch_stream_stops_workers_at_the_first_error(episode_set, tmp_path: Path) -> None:
    loader, order = fail_loader(episode_set, tmp_path)
    before = {p.pid for p in psutil.Process().children()}
    kept: list[BaseException] = []
    with BatchStream(loader) as stream:
        workers = new_children(before)
        assert next(stream)["sample_index"].tolist() == order[:2]
        try:
            next(stream)
        except BadEpisodeError as exc:
            kept.append(exc)  # held on purpose: its traceback holds the torch iterator
    _, alive = psutil.wait_procs(workers, timeout=3)
    assert not alive and len(kept) == 1
    assert list(stream) == []


def test_batch_stream_stops_workers_when_left_early(episode_set, tmp_path: Path) -> None:
    dataset = ManifestDataset(episode_set.good, config(tmp_path))
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate_samples)
    before = {p.pid for p in psutil.Process().children()}
    with BatchStream(loader) as stream:
        workers = new_children(before)
        for _ in stream:
            break
    _, alive = psutil.wait_procs(workers, timeout=3)
    assert not alive


def test_prefetching_stream_delivers_every_batch_in_order(episode_set, tmp_path: Path) -> None:
    cfg = config(tmp_path, batch_size=3)
    sampler = sampler_for(episode_set.good, seed=5)
    expected = sampler.indices().tolist()
    dataset = ManifestIterableDataset(episode_set.good, cfg, sampler)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=seed_worker)
    before = {p.pid for p in psutil.Process().children()}
    got = []
    with BatchStream(loader, prefetch=2) as stream:
        workers = new_children(before)
        for batch in stream:
            got += batch["sample_index"].tolist()
        _, alive = psutil.wait_procs(workers, timeout=3)  # stopped at exhaustion
    assert got == expected and not alive


def test_prefetching_stream_raises_the_workers_error_after_the_batches_before_it(
    episode_set, tmp_path: Path
) -> None:
    loader, order = fail_loader(episode_set, tmp_path)
    before = {p.pid for p in psutil.Process().children()}
    stream = BatchStream(loader, prefetch=3)
    workers = new_children(before)
    assert next(stream)["sample_index"].tolist() == order[:2]
    with pytest.raises(BadEpisodeError, match="bad-episode"):
        next(stream)
    _, alive = psutil.wait_procs(workers, timeout=3)
    assert not alive and list(stream) == []


def test_prefetching_stream_keeps_the_error_object_and_its_type() -> None:
    failure = KeyError("the third batch")

    def batches() -> Iterator[int]:
        yield 1
        yield 2
        raise failure

    stream = BatchStream(batches(), prefetch=1)
    assert [next(stream), next(stream)] == [1, 2]
    with pytest.raises(KeyError) as caught:
        next(stream)
    assert caught.value is failure
    with pytest.raises(StopIteration):
        next(stream)


class _Slow(Dataset[int]):
    """Item ``i`` is ``i``, after ``seconds`` of work (a loader that takes time per batch)."""

    def __init__(self, items: int, seconds: float) -> None:
        self.items, self.seconds = items, seconds

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> int:
        time.sleep(self.seconds)
        return index


def waits_while_computing(prefetch: int, compute_s: float) -> list[float]:
    """Seconds blocked in ``next()`` per batch after the first, computing ``compute_s`` each."""
    loader = DataLoader(_Slow(6, 0.05), batch_size=None, num_workers=0)
    waits = []
    with BatchStream(loader, prefetch=prefetch) as stream:
        next(stream)
        for _ in range(5):
            time.sleep(compute_s)  # the step: the thread takes the next batch meanwhile
            started = time.perf_counter()
            next(stream)
            waits.append(time.perf_counter() - started)
    return waits


def test_prefetching_stream_takes_batches_while_the_step_computes() -> None:
    assert min(waits_while_computing(prefetch=0, compute_s=0.1)) >= 0.045
    assert sorted(waits_while_computing(prefetch=2, compute_s=0.1))[2] < 0.02  # median


def ready_count(stream: BatchStream) -> int:
    assert stream._ready is not None
    return len(stream._ready.items)


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_taking_a_ready_batch_wakes_no_thread() -> None:
    # On a busy machine, a thread woken inside next() could run in the consumer's place and
    # make it wait with a batch ready; so only taking the last ready batch wakes the thread.
    with BatchStream(iter(range(100)), prefetch=3, refill_s=30.0) as stream:
        assert wait_until(lambda: ready_count(stream) == 3, 5)
        assert next(stream) == 0
        time.sleep(0.3)
        assert ready_count(stream) == 2  # not woken: it would have topped up at once
        assert [next(stream), next(stream)] == [1, 2]  # the last ready one wakes it
        assert wait_until(lambda: ready_count(stream) == 3, 5)
        assert [next(stream) for _ in range(4)] == [3, 4, 5, 6]


def test_prefetching_stream_tops_up_within_refill_s() -> None:
    with BatchStream(iter(range(100)), prefetch=2, refill_s=0.05) as stream:
        assert wait_until(lambda: ready_count(stream) == 2, 5)
        assert next(stream) == 0
        assert wait_until(lambda: ready_count(stream) == 2, 1)
        assert list(itertools.islice(stream, 5)) == [1, 2, 3, 4, 5]


def test_close_waits_for_a_batch_assembled_in_the_thread_and_drops_it() -> None:
    # No worker processes: the stream's thread builds the batch itself. close() lets it finish
    # (past join_s) rather than leave it inside the loader for the interpreter's exit.
    started = threading.Event()

    def batches() -> Iterator[str]:
        started.set()
        time.sleep(0.5)
        yield "late"
        yield "never"

    stream = BatchStream(batches(), prefetch=1, join_s=0.05)
    thread = stream._thread
    assert thread is not None and started.wait(5)
    stream.close()
    assert not thread.is_alive()
    assert ready_count(stream) == 0
    assert list(stream) == []


@pytest.mark.parametrize("values", [{"prefetch": -1}, {"prefetch": 1, "refill_s": 0.0}])
def test_stream_settings_are_checked(values: dict[str, float]) -> None:
    with pytest.raises(LoaderError):
        BatchStream([], **values)  # type: ignore[arg-type]


def test_prefetching_stream_left_early_or_dropped_stops_its_thread_and_workers(
    episode_set, tmp_path: Path
) -> None:
    dataset = ManifestDataset(episode_set.good, config(tmp_path))
    for leave in ("break", "drop"):
        loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate_samples)
        before = {p.pid for p in psutil.Process().children()}
        stream = BatchStream(loader, prefetch=2)
        workers = new_children(before)
        thread = stream._thread
        assert thread is not None
        next(stream)
        if leave == "break":
            stream.close()
        else:
            del stream
            gc.collect()
        thread.join(5)
        _, alive = psutil.wait_procs(workers, timeout=5)
        assert not alive and not thread.is_alive(), leave


class _Draws(Dataset[int]):
    """Item ``i`` is a draw from numpy's global generator in the worker that reads it."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return int(np.random.randint(2**31))


def test_seed_worker_gives_each_worker_its_own_reproducible_seed() -> None:
    def draws() -> list[int]:
        loader = DataLoader(
            _Draws(),
            batch_size=1,
            num_workers=2,
            worker_init_fn=seed_worker,
            generator=torch.Generator().manual_seed(11),
        )
        return [int(batch) for batch in loader]

    first = draws()
    assert first == draws()  # same base seed, same draws
    assert first[0] != first[1]  # items 0 and 1 come from different workers


def test_skip_policy_counts_bad_samples(episode_set, tmp_path: Path) -> None:
    cfg = config(tmp_path, bad_episode="skip_and_count", batch_size=5)
    manifest = open_manifest(episode_set.with_bad)
    bad_rows = manifest.row(manifest.num_rows - 1)
    sampler = sampler_for(episode_set.with_bad, seed=1)
    dataset = ManifestIterableDataset(episode_set.with_bad, cfg, sampler)
    delivered, bad = [], 0
    for batch in DataLoader(dataset, batch_size=None, num_workers=2):
        delivered += batch["sample_index"].tolist()
        bad += batch["bad_samples"]
        sampler.mark_consumed(batch_positions(batch))
    assert bad == bad_rows.num_samples
    assert len(delivered) + bad == manifest.num_samples
    assert len(sampler) == 0


def test_corrupt_cached_container_is_fetched_again(episode_set, tmp_path: Path) -> None:
    dataset = ManifestDataset(episode_set.good, config(tmp_path))
    reference = dataset[0]
    source = dataset.source
    source.close()
    cache = source.process.cache
    row = source.process.manifest.row(0)
    path = cache.object_path(row.sha256)
    stat = path.stat()
    path.write_bytes(b"\0" * stat.st_size)  # same size and mtime: only a read can tell
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = dataset[0]
    np.testing.assert_array_equal(again["state"], reference["state"])
    assert cache.status().metrics.corrupt == 1


def test_mismatched_sampler_is_refused(episode_set, tmp_path: Path) -> None:
    with pytest.raises(LoaderError):
        ManifestIterableDataset(episode_set.good, config(tmp_path), EpochSampler(3))


class _PoolProbe(Dataset[bool]):
    """Whether this process decodes a sample's cameras one after another (no pool)."""

    def __init__(self, dataset: ManifestDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> bool:
        self.dataset[index]
        return self.dataset.source.process.decode_pool is None


def test_cameras_decode_side_by_side_only_outside_the_workers(episode_set, tmp_path: Path) -> None:
    dataset = ManifestDataset(episode_set.good, config(tmp_path))
    assert _PoolProbe(dataset)[0] is (len(os.sched_getaffinity(0)) == 1)
    in_workers = DataLoader(_PoolProbe(dataset), batch_size=1, num_workers=2)
    assert [bool(b) for b in in_workers] == [True, True]
    pinned = ManifestDataset(episode_set.good, config(tmp_path, decode_threads=3))
    assert pinned.source.process.decode_pool is not None
    item = pinned[4]
    np.testing.assert_array_equal(item["frames"]["/cam/wrist"], dataset[4]["frames"]["/cam/wrist"])


@pytest.mark.parametrize("inline_bytes", [INLINE_BYTES, 0])
def test_items_cross_from_workers_as_tensors(
    episode_set, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline_bytes: int
) -> None:
    """Small items pickle their bytes; others go through one shared-memory segment each."""
    monkeypatch.setattr(dataset_module, "INLINE_BYTES", inline_bytes)  # the workers fork after
    dataset = ManifestDataset(episode_set.good, config(tmp_path, normalize=False))
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=lambda items: items)
    for batch in itertools.islice(loader, 3):
        for got in batch:
            want = dataset[got["sample_index"]]
            assert type(got) is dict and isinstance(got["frames"]["/cam/front"], torch.Tensor)
            for key in ("state", "state_valid", "actions", "action_valid"):
                assert got[key].dtype == want[key].dtype
                assert torch.equal(got[key], want[key]), key
            for camera, frames in want["frames"].items():
                assert torch.equal(got["frames"][camera], frames)
                assert torch.equal(got["frame_valid"][camera], want["frame_valid"][camera])


def test_an_item_pickles_as_one_storage() -> None:
    item = {
        "frames": {"a": np.arange(2 * 3 * 5 * 3, dtype=np.uint8).reshape(2, 3, 5, 3)},
        "frame_valid": {"a": np.array([True, False])},
        "state": np.linspace(0, 1, 7, dtype=np.float32).reshape(7, 1),
        "steps": np.array([3, -4], dtype=np.int64),
        "sample_index": 9,
    }
    packed = as_tensors(item)  # in the process that read it: the arrays' own memory
    assert packed["state"].data_ptr() == item["state"].ctypes.data
    moved = pickle.loads(pickle.dumps(packed))  # as a worker hands it over: one storage
    assert len({t.untyped_storage().data_ptr() for t in _tensors(moved)}) == 1
    assert type(moved) is dict and moved["sample_index"] == 9
    for copy in (packed, moved):
        assert type(copy["state"]) is torch.Tensor and copy["steps"].dtype == torch.int64
        np.testing.assert_array_equal(copy["frames"]["a"], item["frames"]["a"])
        np.testing.assert_array_equal(copy["frame_valid"]["a"], item["frame_valid"]["a"])
        np.testing.assert_array_equal(copy["state"], item["state"])
        np.testing.assert_array_equal(copy["steps"], item["steps"])


def _tensors(item: dict) -> list[torch.Tensor]:
    return [
        t
        for v in item.values()
        for t in (v.values() if isinstance(v, dict) else [v])
        if isinstance(t, torch.Tensor)
    ]
