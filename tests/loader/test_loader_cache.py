"""The node-local cache in one process: hits, misses, checksums, corruption, eviction, pins."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from loader.cache import NodeCache, ObjectRef
from loader.config import CacheConfig
from loader.errors import CacheError, ChecksumError, LoaderError

KiB = 1024


def disk_bytes(cache: NodeCache) -> int:
    """Bytes of cached and part files on disk."""
    files = [*(cache.root / "objects").rglob("*"), *(cache.root / "tmp").iterdir()]
    return sum(p.stat().st_size for p in files if p.is_file())


def test_miss_then_hit(objects, cache_config) -> None:
    ref = objects.local("a.mcap", 10 * KiB)
    cache = NodeCache(cache_config())
    with cache.acquire(ref) as lease:
        assert lease.outcome == "fill" and lease.path is not None
        assert lease.path.read_bytes() == objects.payload(10 * KiB)
        assert lease.path == cache.object_path(ref.sha256)
    with cache.acquire(ref) as lease, lease.open() as handle:
        assert lease.outcome == "hit" and handle.read() == objects.payload(10 * KiB)
    status = cache.status()
    assert (status.objects, status.used_bytes, status.pinned) == (1, 10 * KiB, 0)
    m = status.metrics
    assert (m.hits, m.misses, m.fills, m.bytes_fetched) == (1, 1, 1, 10 * KiB)
    assert cache.metrics.hits == 1


def test_wrong_checksum_is_refused_and_leaves_nothing(objects, cache_config) -> None:
    good = objects.local("a.mcap", 4 * KiB)
    bad = ObjectRef(uri=good.uri, sha256="0" * 64, size=good.size, episode_id="ep-1")
    cache = NodeCache(cache_config())
    with pytest.raises(ChecksumError) as caught:
        cache.acquire(bad)
    assert caught.value.episode_id == "ep-1" and not caught.value.retryable
    assert cache.status().used_bytes == 0 and disk_bytes(cache) == 0


def test_changed_cache_file_is_fetched_again(objects, cache_config) -> None:
    ref = objects.local("a.mcap", 4 * KiB)
    cache = NodeCache(cache_config())
    path = cache.fetch(ref)
    assert path is not None
    path.write_bytes(b"garbage" * 100)
    with cache.acquire(ref) as lease:
        assert lease.outcome == "fill" and lease.path is not None
        assert lease.path.read_bytes() == objects.payload(4 * KiB)
    assert cache.status().metrics.corrupt == 1


def test_bit_rot_is_caught_by_verify_on_open(objects, cache_config) -> None:
    ref = objects.local("a.mcap", 4 * KiB)
    cache = NodeCache(cache_config(verify_on_open=True))
    path = cache.fetch(ref)
    assert path is not None
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    with cache.acquire(ref) as lease:
        assert lease.outcome == "fill" and lease.path.read_bytes() == objects.payload(4 * KiB)


def test_lru_eviction_spares_pinned_objects(objects, cache_config) -> None:
    refs = [objects.local(f"{i}.mcap", 10 * KiB, seed=i) for i in range(4)]
    cache = NodeCache(cache_config(capacity_bytes=30 * KiB))
    pinned = cache.acquire(refs[0])
    cache.fetch(refs[1])
    cache.fetch(refs[2])
    cache.fetch(refs[3])  # evicts refs[1], the least recently used unpinned object
    assert cache.object_path(refs[0].sha256).exists()
    assert not cache.object_path(refs[1].sha256).exists()
    assert cache.status().metrics.evictions == 1
    pinned.release()


def test_working_set_over_capacity_streams(objects, cache_config) -> None:
    refs = [objects.local(f"{i}.mcap", 10 * KiB, seed=i) for i in range(3)]
    cache = NodeCache(cache_config(capacity_bytes=25 * KiB))
    held = [cache.acquire(refs[0]), cache.acquire(refs[1])]
    with cache.acquire(refs[2]) as lease, lease.open() as handle:
        assert lease.streamed and lease.outcome == "stream"
        handle.seek(5)
        assert handle.read(10) == objects.payload(10 * KiB, seed=2)[5:15]
    assert all(cache.object_path(r.sha256).exists() for r in refs[:2])
    assert cache.status().metrics.evictions == 0
    for lease in held:
        lease.release()
    too_big = objects.local("big.mcap", 30 * KiB)
    assert cache.fetch(too_big) is None


def _pin_and_die(config: CacheConfig, ref: ObjectRef) -> None:
    NodeCache(config).acquire(ref)
    os._exit(0)  # no release: the pin outlives the process


def test_dead_process_pins_are_reclaimed(objects, cache_config) -> None:
    config = cache_config(capacity_bytes=10 * KiB)
    first, second = objects.local("a", 10 * KiB, seed=1), objects.local("b", 10 * KiB, seed=2)
    child = multiprocessing.get_context("fork").Process(target=_pin_and_die, args=(config, first))
    child.start()
    child.join()
    cache = NodeCache(config)
    with cache.index.transaction() as conn:  # the dead child's pin is still recorded
        assert conn.execute("SELECT COUNT(*) FROM pins").fetchone() == (1,)
    with cache.acquire(second) as lease:
        assert lease.outcome == "fill"
    assert not cache.object_path(first.sha256).exists()


def test_evict_command(objects, cache_config) -> None:
    refs = [objects.local(f"{i}", 10 * KiB, seed=i) for i in range(3)]
    cache = NodeCache(cache_config())
    for ref in refs:
        cache.fetch(ref)
    with cache.acquire(refs[2]):
        assert cache.evict(target_bytes=15 * KiB) == (2, 20 * KiB)
        assert cache.evict() == (0, 0)
    assert cache.status().used_bytes == 10 * KiB
    assert disk_bytes(cache) == 10 * KiB


def test_no_disk_room_streams_instead(objects, cache_config, tmp_path) -> None:
    refs = [objects.local(f"{i}", 64 * KiB, seed=i) for i in range(2)]
    NodeCache(cache_config()).fetch(refs[0])
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    # The disk must keep more free than it has: evicting 64 KiB cannot make room, so the
    # object is streamed and nothing is evicted for nothing.
    tight = NodeCache(cache_config(min_free_bytes=free + 2**30))
    with tight.acquire(refs[1]) as lease:
        assert lease.streamed
    assert tight.object_path(refs[0].sha256).exists()


def test_bad_refs_and_pickling(cache_config) -> None:
    cache = NodeCache(cache_config())
    with pytest.raises(CacheError):
        cache.acquire(ObjectRef(uri="/x", sha256="XYZ", size=1))
    import pickle

    copy = pickle.loads(pickle.dumps(cache))
    assert copy.config == cache.config
    error = pickle.loads(pickle.dumps(ChecksumError("bad", uri="/x", key="k", episode_id="e")))
    assert isinstance(error, LoaderError) and (error.uri, error.episode_id) == ("/x", "e")


def test_s3_miss_falls_back_to_the_store(s3_config, cache_config, objects, tmp_path: Path) -> None:
    from loader.store import ObjectStore

    store = ObjectStore(s3_config)
    uri = f"s3://quarry-test/{tmp_path.name}/a.mcap"
    fs, path = store.filesystem(uri)
    fs.pipe_file(path, objects.payload(50 * KiB))
    cache = NodeCache(cache_config(), store)
    ref = ObjectRef(uri=uri, sha256=objects.sha(objects.payload(50 * KiB)), size=50 * KiB)
    assert cache.fetch(ref).read_bytes() == objects.payload(50 * KiB)
