"""The cache across real processes: one download per object, kills, full disks, capacity."""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.cache import Lease, NodeCache, ObjectRef
from loader.config import CacheConfig, StoreConfig
from loader.errors import CacheFullError
from loader.store import ObjectStore
from loader.warm import warm_cache

KiB = 1024
MiB = 1024 * KiB
FORK = multiprocessing.get_context("fork")


def _fetch_all(config: CacheConfig, refs: list[ObjectRef], barrier, results) -> None:
    barrier.wait()
    try:
        cache = NodeCache(config)
        digests = []
        for ref in refs:
            with cache.acquire(ref) as lease, lease.open() as handle:
                digests.append(ObjectRefDigest.of(handle.read()))
        results.put((os.getpid(), digests, cache.metrics.fills))
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put((os.getpid(), repr(exc), -1))


class ObjectRefDigest:
    @staticmethod
    def of(data: bytes) -> str:
        import hashlib

        return hashlib.sha256(data).hexdigest()


def test_one_download_per_object_across_processes(objects, cache_config) -> None:
    refs = [objects.local(f"{i}.mcap", 2 * MiB, seed=i) for i in range(6)]
    config = cache_config()
    barrier, results = FORK.Barrier(4), FORK.Queue()
    workers = [
        FORK.Process(
            target=_fetch_all, args=(config, refs[::-1] if i % 2 else refs, barrier, results)
        )
        for i in range(4)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    for _, digests, fills in reports:
        assert fills >= 0, digests
        assert sorted(digests) == sorted(r.sha256 for r in refs)
    assert sum(fills for _, _, fills in reports) == 6
    status = NodeCache(config).status()
    assert (status.metrics.fills, status.metrics.misses, status.objects) == (6, 6, 6)
    assert status.metrics.hits == 4 * 6 - 6
    assert status.pinned == 0 and status.preparing == 0


def _fill_under_file_size_limit(config: CacheConfig, ref: ObjectRef, results) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 * MiB, 1 * MiB))
    cache = NodeCache(config)
    try:
        cache.fetch(ref)
    except CacheFullError as exc:
        results.put(("full", str(exc), exc.key))
    else:
        results.put(("ok", "", ""))


def test_full_disk_evicts_then_fails_clearly(objects, cache_config) -> None:
    config = cache_config()
    small = objects.local("small", 64 * KiB, seed=1)
    big = objects.local("big", 2 * MiB, seed=2)
    NodeCache(config).fetch(small)
    results = FORK.Queue()
    child = FORK.Process(target=_fill_under_file_size_limit, args=(config, big, results))
    child.start()
    kind, message, key = results.get(timeout=60)
    child.join(timeout=30)
    assert kind == "full" and "cache disk full" in message and key == big.sha256
    status = NodeCache(config).status()
    assert status.metrics.evictions == 1  # it evicted what it could before failing
    assert (status.used_bytes, status.preparing) == (0, 0)
    assert list((Path(config.root) / "tmp").iterdir()) == []


def _warm_forever(config: CacheConfig, store_config: StoreConfig, refs: list[ObjectRef]) -> None:
    warm_cache(NodeCache(config, ObjectStore(store_config)), refs, threads=1)


@pytest.mark.slow
def test_killed_warm_up_resumes(s3_config, objects, cache_config, tmp_path: Path) -> None:
    store = ObjectStore(s3_config.model_copy(update={"block_bytes": 64 * KiB}))
    refs = []
    for i in range(3):
        data = objects.payload(3 * MiB, seed=i)
        uri = f"s3://quarry-test/{tmp_path.name}/{i}.mcap"
        fs, path = store.filesystem(uri)
        fs.pipe_file(path, data)
        refs.append(ObjectRef(uri=uri, sha256=objects.sha(data), size=len(data), episode_id=str(i)))
    config = cache_config(copy_block_bytes=64 * KiB)
    child = FORK.Process(target=_warm_forever, args=(config, store.config, refs))
    child.start()
    cache = NodeCache(config, store)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill it in the middle of its second object
        if cache.status().objects >= 1 and any((Path(config.root) / "tmp").glob("*.part")):
            part = next((Path(config.root) / "tmp").glob("*.part"))
            if part.stat().st_size > 0:
                break
        time.sleep(0.002)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    before = cache.status()
    assert before.objects >= 1 and before.preparing == 1
    report = warm_cache(cache, refs)
    assert report.already_local == before.objects
    assert report.fetched == 3 - before.objects and not report.failed
    after = cache.status()
    assert after.objects == 3 and after.preparing == 0 and after.pinned == 0
    # The half-written object was continued, not downloaded again.
    assert after.metrics.bytes_fetched < 3 * 3 * MiB
    for ref in refs:
        assert cache.fetch(ref).read_bytes() == objects.payload(3 * MiB, seed=int(ref.episode_id))


OPS = st.lists(
    st.tuples(st.sampled_from(["get", "hold", "release", "evict"]), st.integers(0, 7)),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=8, max_size=8),
    capacity=st.integers(1, 100),
    ops=OPS,
)
def test_cache_never_exceeds_capacity(tmp_path_factory, sizes, capacity, ops) -> None:
    root = tmp_path_factory.mktemp("cap")
    refs = []
    for i, size in enumerate(sizes):
        data = bytes([i]) * size * KiB
        path = root / "src" / str(i)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        refs.append(ObjectRef(uri=str(path), sha256=ObjectRefDigest.of(data), size=len(data)))
    cache = NodeCache(CacheConfig(root=root / "cache", capacity_bytes=capacity * KiB))
    held: list[Lease] = []
    for op, i in ops:
        if op == "get":
            cache.fetch(refs[i])
        elif op == "hold":
            held.append(cache.acquire(refs[i]))
        elif op == "release" and held:
            held.pop(i % len(held)).release()
        elif op == "evict":
            cache.evict(target_bytes=i * KiB)
        status = cache.status()
        on_disk = sum(
            p.stat().st_size for p in (root / "cache" / "objects").rglob("*") if p.is_file()
        )
        assert status.used_bytes <= capacity * KiB
        assert on_disk == status.used_bytes
        for lease in held:  # what is held is never evicted
            assert lease.streamed or lease.path.read_bytes() == Path(lease.ref.uri).read_bytes()
    for lease in held:
        lease.release()
    assert cache.status().pinned == 0


def _warm(config: CacheConfig, refs: list[ObjectRef], barrier, results) -> None:
    barrier.wait()
    report = warm_cache(NodeCache(config), refs, threads=2)
    results.put((report.fetched, report.already_local, report.bytes_fetched, report.failed))


def test_two_warm_ups_of_the_same_objects_download_each_once(objects, cache_config) -> None:
    refs = [objects.local(f"{i}.mcap", 1 * MiB, seed=i) for i in range(4)]
    config = cache_config()
    barrier, results = FORK.Barrier(2), FORK.Queue()
    warmers = [FORK.Process(target=_warm, args=(config, refs, barrier, results)) for _ in range(2)]
    for warmer in warmers:
        warmer.start()
    reports = [results.get(timeout=60) for _ in warmers]
    for warmer in warmers:
        warmer.join(timeout=30)
        assert warmer.exitcode == 0
    assert all(failed == {} for *_, failed in reports)
    assert sum(fetched for fetched, *_ in reports) == 4  # one download per object
    assert sum(fetched + local for fetched, local, *_ in reports) == 8
    assert sum(size for _, _, size, _ in reports) == 4 * MiB
    status = NodeCache(config).status()
    assert (status.metrics.fills, status.objects, status.pinned) == (4, 4, 0)
