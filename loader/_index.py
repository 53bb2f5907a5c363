"""The cache index: one SQLite database per cache folder, shared by every process of a node.

Every change is one ``BEGIN IMMEDIATE`` transaction, so SQLite's write lock (a file lock on
the database) serializes reservations, evictions and pins across processes; the bytes in use
are a counter kept in the same transactions, with its invariants checked on every change.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psutil
from filelock import FileLock

from .errors import CacheError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY, state TEXT NOT NULL, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL DEFAULT 0, last_access INTEGER NOT NULL, owner TEXT
);
CREATE INDEX IF NOT EXISTS entries_lru ON entries (state, last_access);
CREATE TABLE IF NOT EXISTS pins (
    key TEXT NOT NULL, holder TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (key, holder)
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
USED = "used_bytes"
CAPACITY = "capacity_bytes"


class EntryState(StrEnum):
    """Where an object is: not cached, being filled by one process, or on local disk."""

    REMOTE = "remote"
    PREPARING = "preparing"
    LOCAL = "local"


class Decision(StrEnum):
    """What a reservation decided: the object is already local, fill it, or stream it."""

    HIT = "hit"
    FILL = "fill"
    STREAM = "stream"


@dataclass(frozen=True)
class Entry:
    """An index row: object ``key`` of ``size`` bytes, its state and file mtime (ns)."""

    key: str
    state: EntryState
    size: int
    mtime_ns: int
    owner: str | None


def holder_id() -> str:
    """This process as a pin holder: host, pid and start time (so a reused pid is not alive)."""
    created = psutil.Process().create_time()
    return f"{socket.gethostname()}:{os.getpid()}:{created:.3f}"


def holder_alive(holder: str) -> bool:
    """Whether the process behind ``holder`` still runs (other hosts count as alive)."""
    host, pid, created = holder.rsplit(":", 2)
    if host != socket.gethostname():
        return True
    try:
        process = psutil.Process(int(pid))
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return f"{process.create_time():.3f}" == created
    except psutil.NoSuchProcess:
        return False


_LIVE_INDEXES: weakref.WeakSet[CacheIndex] = weakref.WeakSet()
_INHERITED: list[sqlite3.Connection] = []


def _keep_inherited_connections() -> None:
    """After a fork, hold on to every connection the parent had open, forever.

    A child must never close its parent's SQLite connections (closing runs WAL cleanup with
    locks the child does not own, and stalls worker exit); holding them keeps the garbage
    collector from closing them.
    """
    for index in list(_LIVE_INDEXES):
        if index._conn is not None:
            _INHERITED.append(index._conn)
            index._conn = None


os.register_at_fork(after_in_child=_keep_inherited_connections)


class CacheIndex:
    """Transactions over the index database at ``path``.

    :param timeout_s: longest wait for another process's transaction, seconds.
    """

    def __init__(self, path: Path, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._pid = -1
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        _LIVE_INDEXES.add(self)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            # Switching to WAL and creating the schema take locks SQLite does not wait for
            # (it answers "database is locked" at once), so processes set up one at a time.
            with FileLock(self.path.with_suffix(".setup.lock"), timeout=self.timeout_s):
                conn = sqlite3.connect(
                    self.path, timeout=self.timeout_s, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; the block's changes commit together or not at all."""
        with self._lock:
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise CacheError(f"cache index unavailable: {exc}") from exc
            try:
                yield conn
                self._check_usage(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _check_usage(self, conn: sqlite3.Connection) -> None:
        used = counter(conn, USED)
        if used < 0:
            raise CacheError(f"negative cache usage: {used} bytes")

    def close(self) -> None:
        """Close this process's connection."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


def audit(conn: sqlite3.Connection) -> int:
    """Check that the usage counter equals the sum of entry sizes; return it (bytes)."""
    used = counter(conn, USED)
    (total,) = conn.execute("SELECT COALESCE(SUM(size), 0) FROM entries").fetchone()
    if used != total:
        raise CacheError(f"cache usage counter {used} differs from its entries' {total} bytes")
    return used


def counter(conn: sqlite3.Connection, name: str) -> int:
    """Current value of counter ``name`` (0 if never set)."""
    row = conn.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
    return 0 if row is None else int(row[0])


def bump(conn: sqlite3.Connection, **deltas: int) -> None:
    """Add ``deltas`` to the named counters."""
    for name, delta in deltas.items():
        if delta:
            conn.execute(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                (name, delta),
            )


def get_setting(conn: sqlite3.Connection, name: str) -> int | None:
    """Setting ``name`` as the last process that wrote it left it, if any."""
    row = conn.execute("SELECT value FROM settings WHERE name = ?", (name,)).fetchone()
    return None if row is None else int(row[0])


def set_setting(conn: sqlite3.Connection, name: str, value: int) -> None:
    """Record setting ``name`` (e.g. the capacity a filling process was configured with)."""
    conn.execute(
        "INSERT INTO settings (name, value) VALUES (?, ?) "
        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        (name, value),
    )


def get_entry(conn: sqlite3.Connection, key: str) -> Entry | None:
    """The index row of ``key``, if any."""
    row = conn.execute(
        "SELECT key, state, size, mtime_ns, owner FROM entries WHERE key = ?", (key,)
    ).fetchone()
    return None if row is None else Entry(row[0], EntryState(row[1]), row[2], row[3], row[4])


def add_pin(conn: sqlite3.Connection, key: str, holder: str) -> None:
    """Pin ``key`` for ``holder`` (pins count, so leases nest) and mark it recently used."""
    conn.execute(
        "INSERT INTO pins (key, holder, count) VALUES (?, ?, 1) "
        "ON CONFLICT (key, holder) DO UPDATE SET count = count + 1",
        (key, holder),
    )
    conn.execute("UPDATE entries SET last_access = ? WHERE key = ?", (time.time_ns(), key))


def remove_pin(conn: sqlite3.Connection, key: str, holder: str) -> None:
    """Drop one pin of ``key`` held by ``holder``."""
    conn.execute("UPDATE pins SET count = count - 1 WHERE key = ? AND holder = ?", (key, holder))
    conn.execute("DELETE FROM pins WHERE count <= 0")


def delete_entry(conn: sqlite3.Connection, key: str) -> int:
    """Remove ``key``'s row and its pins; return the bytes released from the usage counter."""
    entry = get_entry(conn, key)
    if entry is None:
        return 0
    conn.execute("DELETE FROM entries WHERE key = ?", (key,))
    conn.execute("DELETE FROM pins WHERE key = ?", (key,))
    bump(conn, **{USED: -entry.size})
    return entry.size


def reclaim_dead(
    conn: sqlite3.Connection, remove_files: Callable[[str], None], *, fills: bool = True
) -> int:
    """Drop pins (and, with ``fills``, unfinished fills) of dead processes.

    Returns how many dead holders were found. Without ``fills``, a dead process's half-written
    object stays for the next fill of that object to adopt and continue.
    """
    holders = {h for (h,) in conn.execute("SELECT DISTINCT holder FROM pins")}
    query = "SELECT DISTINCT owner FROM entries WHERE state = 'preparing'"
    owners = {o for (o,) in conn.execute(query)} if fills else set()
    dead = [h for h in holders | owners if not holder_alive(h)]
    for holder in dead:
        conn.execute("DELETE FROM pins WHERE holder = ?", (holder,))
        if not fills:
            continue
        stale = conn.execute(
            "SELECT key FROM entries WHERE state = 'preparing' AND owner = ?", (holder,)
        ).fetchall()
        for (key,) in stale:
            delete_entry(conn, key)
            remove_files(key)
    return len(dead)


def pick_victims(conn: sqlite3.Connection, need: int, exclude: str | None = None) -> list[Entry]:
    """Least recently used local, unpinned entries whose sizes add up to ``need`` bytes.

    Returns fewer (all that qualify) when they cannot add up to ``need``.
    """
    rows = conn.execute(
        "SELECT key, size, mtime_ns FROM entries WHERE state = 'local' AND key != ? "
        "AND key NOT IN (SELECT key FROM pins) ORDER BY last_access",
        (exclude or "",),
    )
    victims: list[Entry] = []
    freed = 0
    for key, size, mtime_ns in rows:
        if freed >= need:
            break
        victims.append(Entry(key, EntryState.LOCAL, size, mtime_ns, None))
        freed += size
    return victims
