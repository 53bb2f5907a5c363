"""The node-local cache: content-addressed objects shared by every process of a node.

An object moves through the states ``remote -> preparing -> local`` (see ``_index.py``).
One process fills it, under a per-object file lock, into a temp file that is hashed as it is
written, fsynced and renamed into place; every other process waiting on the lock then finds
it local, so a node downloads each object once. Bytes in use never exceed the capacity:
room is made by evicting least-recently-used objects that no live process has pinned, and
when that is not enough the object is streamed from the object store instead of cached, so
a working set larger than the cache slows reads down but never deadlocks.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from . import _index as ix
from ._index import Decision, EntryState
from .config import CacheConfig
from .errors import CacheError, CacheFullError, ChecksumError
from .lease import Lease, ObjectRef, check_ref
from .metrics import CacheMetrics, CacheStatus
from .store import ObjectStore

__all__ = ["Lease", "NodeCache", "ObjectRef"]

_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class NodeCache:
    """The cache folder at ``config.root``; safe to use from many processes and threads.

    Pickles as its configuration; each process re-opens the index lazily.
    """

    def __init__(self, config: CacheConfig, store: ObjectStore | None = None) -> None:
        self.config = config
        self.store = store or ObjectStore()
        self.root = Path(config.root)
        for sub in ("objects", "tmp", "locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.index = ix.CacheIndex(self.root / "index.sqlite", config.lock_timeout_s)
        self.metrics = CacheMetrics()
        self._holder: tuple[int, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "store": self.store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], state["store"])  # type: ignore[misc]

    @property
    def holder(self) -> str:
        """This process's pin-holder ID."""
        if self._holder is None or self._holder[0] != os.getpid():
            self._holder = (os.getpid(), ix.holder_id())
        return self._holder[1]

    def object_path(self, key: str) -> Path:
        """Where object ``key`` lies once local."""
        return self.root / "objects" / key[:2] / key

    def part_path(self, key: str) -> Path:
        """The temp file object ``key`` is filled into."""
        return self.root / "tmp" / f"{key}.part"

    def acquire(self, ref: ObjectRef) -> Lease:
        """A lease on ``ref``: its local path (downloaded first on a miss), or a stream.

        :raises ChecksumError: the object store's bytes do not hash to ``ref.sha256``.
        :raises CacheFullError: the disk stayed full after evicting all it could.
        :raises CacheError: waiting for another process's fill timed out (retryable).
        """
        check_ref(ref)
        lease = self._try_hit(ref)
        return lease if lease is not None else self._acquire_locked(ref)

    def fetch(self, ref: ObjectRef) -> Path | None:
        """Make ``ref`` local without keeping it pinned; ``None`` if it had to be streamed."""
        with self.acquire(ref) as lease:
            return lease.path

    def lookup(self, key: str, uri: str = "") -> Lease | None:
        """A lease on object ``key`` if it is local now (a hit), else ``None``; never fetches.

        :param uri: where the object comes from, for the lease's reference (may be empty).
        """
        with self.index.transaction() as conn:
            entry = ix.get_entry(conn, key)
        if entry is None or entry.state is not EntryState.LOCAL:
            return None
        ref = ObjectRef(uri, key, entry.size)
        check_ref(ref)
        return self._try_hit(ref)

    def recorded_capacity(self) -> int | None:
        """The capacity, bytes, of the last process that reserved room in this cache folder.

        Commands that only inspect the cache (``quarry cache status|evict``) report against it
        when they are not given one.
        """
        with self.index.transaction() as conn:
            return ix.get_setting(conn, ix.CAPACITY)

    def _try_hit(self, ref: ObjectRef) -> Lease | None:
        with self.index.transaction() as conn:
            entry = ix.get_entry(conn, ref.sha256)
            if entry is None or entry.state is not EntryState.LOCAL:
                return None
            ix.add_pin(conn, ref.sha256, self.holder)
            ix.bump(conn, hits=1, bytes_hit=entry.size)
        lease = Lease(self, ref, self.object_path(ref.sha256), Decision.HIT)
        if self._file_ok(entry) and (not self.config.verify_on_open or self._hash_ok(ref)):
            self.metrics.add(hits=1, bytes_hit=entry.size)
            return lease
        lease.release()
        self._drop_corrupt(ref.sha256, entry.mtime_ns, undo_hit=entry.size)
        return None

    def _file_ok(self, entry: ix.Entry) -> bool:
        try:
            stat = self.object_path(entry.key).stat()
        except FileNotFoundError:
            return False
        return stat.st_size == entry.size and stat.st_mtime_ns == entry.mtime_ns

    def _hash_ok(self, ref: ObjectRef) -> bool:
        digest = hashlib.sha256()
        with self.object_path(ref.sha256).open("rb") as handle:
            while block := handle.read(self.config.copy_block_bytes):
                digest.update(block)
        return digest.hexdigest() == ref.sha256

    def _drop_corrupt(self, key: str, mtime_ns: int, undo_hit: int | None = None) -> None:
        """Forget a local object whose file no longer matches (unless already refilled).

        :param undo_hit: size, bytes, of a hit counted for the object before its file was
            found bad; the node-wide counters take that hit back.
        """
        with self.index.transaction() as conn:
            if undo_hit is not None:
                ix.bump(conn, hits=-1, bytes_hit=-undo_hit)
            entry = ix.get_entry(conn, key)
            if entry is not None and entry.state is EntryState.LOCAL and entry.mtime_ns == mtime_ns:
                ix.delete_entry(conn, key)
                self._remove_files(key)
                ix.bump(conn, corrupt=1)
                self.metrics.add(corrupt=1)

    def _acquire_locked(self, ref: ObjectRef) -> Lease:
        lock = FileLock(
            self.root / "locks" / f"{ref.sha256}.lock", timeout=self.config.lock_timeout_s
        )
        try:
            lock.acquire()
        except Timeout as exc:
            message = f"timed out after {self.config.lock_timeout_s} s waiting for another fill"
            raise CacheError(
                message, uri=ref.uri, key=ref.sha256, episode_id=ref.episode_id
            ) from exc
        try:
            decision = self._reserve(ref)
            if decision is Decision.HIT:
                return Lease(self, ref, self.object_path(ref.sha256), Decision.HIT)
            if decision is Decision.STREAM:
                self.metrics.add(streams=1, bytes_streamed=ref.size)
                return Lease(self, ref, None, Decision.STREAM)
            return self._fill(ref)
        finally:
            lock.release()

    def _reserve(self, ref: ObjectRef) -> Decision:
        """Under the object's lock: hit, adopt an orphaned fill, or make room and reserve."""
        key = ref.sha256
        with self.index.transaction() as conn:
            entry = ix.get_entry(conn, key)
            if entry is not None and entry.state is EntryState.LOCAL:
                if self._file_ok(entry):
                    ix.add_pin(conn, key, self.holder)
                    ix.bump(conn, hits=1, bytes_hit=entry.size)
                    self.metrics.add(hits=1, bytes_hit=entry.size)
                    return Decision.HIT
                ix.delete_entry(conn, key)
                self._remove_files(key)
                ix.bump(conn, corrupt=1)
            elif entry is not None:  # an orphaned fill: its owner died (we hold the lock)
                ix.delete_entry(conn, key)
            ix.set_setting(conn, ix.CAPACITY, self.config.capacity_bytes)
            if not self._make_room(conn, ref.size, key):
                ix.bump(conn, streams=1, bytes_streamed=ref.size)
                return Decision.STREAM
            conn.execute(
                "INSERT INTO entries (key, state, size, last_access, owner) VALUES (?, ?, ?, ?, ?)",
                (key, EntryState.PREPARING.value, ref.size, time.time_ns(), self.holder),
            )
            ix.bump(conn, **{ix.USED: ref.size}, misses=1)
        self.metrics.add(misses=1)
        return Decision.FILL

    def _make_room(self, conn: sqlite3.Connection, size: int, key: str) -> bool:
        """Evict so ``size`` more bytes fit the capacity and the disk; ``False`` if they cannot.

        Nothing is evicted unless enough can be, so a too-large working set does not thrash.
        """
        if size > self.config.capacity_bytes:
            return False
        used = ix.counter(conn, ix.USED)
        free = shutil.disk_usage(self.root).free - self.config.min_free_bytes
        need = max(used + size - self.config.capacity_bytes, size - free)
        if need <= 0:
            return True
        victims = ix.pick_victims(conn, need, exclude=key)
        if sum(v.size for v in victims) < need and ix.reclaim_dead(conn, self._remove_files):
            victims = ix.pick_victims(conn, need, exclude=key)
        if sum(v.size for v in victims) < need:
            return False
        self._evict_entries(conn, victims)
        return True

    def _evict_entries(self, conn: sqlite3.Connection, victims: list[ix.Entry]) -> int:
        freed = 0
        for victim in victims:
            freed += ix.delete_entry(conn, victim.key)
            self._remove_files(victim.key)
        ix.bump(conn, evictions=len(victims), bytes_evicted=freed)
        self.metrics.add(evictions=len(victims), bytes_evicted=freed)
        return freed

    def _remove_files(self, key: str) -> None:
        self.object_path(key).unlink(missing_ok=True)
        self.part_path(key).unlink(missing_ok=True)

    def _fill(self, ref: ObjectRef) -> Lease:
        try:
            fetched, mtime_ns = self._download_with_room(ref)
        except BaseException:
            with self.index.transaction() as conn:
                ix.delete_entry(conn, ref.sha256)
                self._remove_files(ref.sha256)
            raise
        with self.index.transaction() as conn:
            conn.execute(
                "UPDATE entries SET state = ?, mtime_ns = ?, last_access = ?, owner = NULL "
                "WHERE key = ?",
                (EntryState.LOCAL.value, mtime_ns, time.time_ns(), ref.sha256),
            )
            ix.add_pin(conn, ref.sha256, self.holder)
            ix.bump(conn, fills=1, bytes_fetched=fetched)
        self.metrics.add(fills=1, bytes_fetched=fetched)
        return Lease(self, ref, self.object_path(ref.sha256), Decision.FILL)

    def _download_with_room(self, ref: ObjectRef) -> tuple[int, int]:
        """Download; on a full disk evict everything unpinned and try once more."""
        try:
            return self._download(ref)
        except OSError as exc:
            if exc.errno not in _NO_SPACE:
                raise
        with self.index.transaction() as conn:
            self._evict_entries(conn, ix.pick_victims(conn, 2**62, exclude=ref.sha256))
        try:
            return self._download(ref)
        except OSError as exc:
            if exc.errno not in _NO_SPACE:
                raise
            free = shutil.disk_usage(self.root).free
            message = (
                f"cache disk full at {self.root}: {ref.size} bytes needed, {free} free after "
                "evicting every unpinned object; raise the disk or lower capacity_bytes"
            )
            raise CacheFullError(
                message, uri=ref.uri, key=ref.sha256, episode_id=ref.episode_id
            ) from exc

    def _download(self, ref: ObjectRef) -> tuple[int, int]:
        """Fill the part file (resuming a partial one), verify, publish; (bytes fetched, mtime)."""
        part = self.part_path(ref.sha256)
        fetched, digest = self._write_part(ref, part, resume=True)
        if digest != ref.sha256:
            part.unlink(missing_ok=True)
            fetched, digest = self._write_part(ref, part, resume=False)
        if digest != ref.sha256:
            part.unlink(missing_ok=True)
            message = f"object store bytes hash to {digest}, manifest says {ref.sha256}"
            raise ChecksumError(message, uri=ref.uri, key=ref.sha256, episode_id=ref.episode_id)
        final = self.object_path(ref.sha256)
        final.parent.mkdir(exist_ok=True)
        part.replace(final)
        return fetched, final.stat().st_mtime_ns

    def _write_part(self, ref: ObjectRef, part: Path, *, resume: bool) -> tuple[int, str]:
        digest = hashlib.sha256()
        offset = part.stat().st_size if resume and part.exists() else 0
        if offset > ref.size:
            offset = 0
        with part.open("r+b" if offset else "wb") as handle:
            while handle.tell() < offset:  # hash the bytes a killed fill left behind
                digest.update(
                    handle.read(min(self.config.copy_block_bytes, offset - handle.tell()))
                )
            handle.seek(offset)
            handle.truncate()
            fetched = 0
            for block in self.store.iter_blocks(ref.uri, offset, self.config.copy_block_bytes):
                handle.write(block)
                digest.update(block)
                fetched += len(block)
            handle.flush()
            os.fsync(handle.fileno())
        return fetched, digest.hexdigest()

    def discard(self, ref: ObjectRef) -> bool:
        """Drop ``ref``'s local copy if its bytes no longer hash to its key (a full read).

        Returns whether it was dropped; readers holding it open keep their file handles.
        """
        path = self.object_path(ref.sha256)
        if not path.exists() or self._hash_ok(ref):
            return False
        self._drop_corrupt(ref.sha256, path.stat().st_mtime_ns)
        return True

    def _unpin(self, key: str) -> None:
        with self.index.transaction() as conn:
            ix.remove_pin(conn, key, self.holder)

    def evict(self, target_bytes: int = 0) -> tuple[int, int]:
        """Evict unpinned objects, least recently used first, until at most ``target_bytes``
        bytes are in use (as far as pins allow); return (objects, bytes) evicted."""
        with self.index.transaction() as conn:
            ix.reclaim_dead(conn, self._remove_files)
            need = ix.counter(conn, ix.USED) - target_bytes
            victims = ix.pick_victims(conn, need) if need > 0 else []
            return len(victims), self._evict_entries(conn, victims)

    def status(self) -> CacheStatus:
        """Usage, entries, live pins and the persisted counters of every process.

        Reclaims the pins of dead processes (their unfinished fills stay, to be continued), and
        audits the usage counter against the entries.
        """
        with self.index.transaction() as conn:
            ix.reclaim_dead(conn, self._remove_files, fills=False)
            used = ix.audit(conn)
            states = dict(
                conn.execute("SELECT state, COUNT(*) FROM entries GROUP BY state").fetchall()
            )
            (pinned,) = conn.execute("SELECT COUNT(DISTINCT key) FROM pins").fetchone()
            counters = dict(conn.execute("SELECT name, value FROM counters").fetchall())
        free = shutil.disk_usage(self.root).free
        return CacheStatus(
            root=str(self.root),
            capacity_bytes=self.config.capacity_bytes,
            used_bytes=used,
            objects=states.get(EntryState.LOCAL.value, 0),
            preparing=states.get(EntryState.PREPARING.value, 0),
            pinned=pinned,
            free_disk_bytes=free,
            effective_capacity_bytes=self._effective_capacity(used, free),
            metrics=CacheMetrics.from_counters(counters),
        )

    def _effective_capacity(self, used: int, free: int) -> int:
        """The configured capacity, capped by what the disk holds: the cache's own bytes plus
        the free space it may still take (``_make_room`` evicts to the same bound)."""
        room = used + max(free - self.config.min_free_bytes, 0)
        return min(self.config.capacity_bytes, room)

    def close(self) -> None:
        """Close this process's index connection."""
        self.index.close()
