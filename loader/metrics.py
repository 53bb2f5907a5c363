"""Cache metrics: per-process counters and the node-wide totals persisted in the index."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class CacheMetrics:
    """Counters of cache use (bytes are object sizes, not bytes read by the caller).

    :param hits: acquisitions that found the object local.
    :param misses: acquisitions that reserved room and filled the object.
    :param streams: acquisitions served from the object store because the object did not fit.
    :param fills: objects downloaded and verified.
    :param bytes_hit: bytes of objects acquired as hits.
    :param bytes_fetched: bytes downloaded into the cache (a resumed fill counts the rest).
    :param bytes_streamed: bytes of objects acquired as streams.
    :param evictions: objects evicted.
    :param bytes_evicted: bytes evicted.
    :param corrupt: local objects found changed or corrupt and dropped for a refetch.
    """

    hits: int = 0
    misses: int = 0
    streams: int = 0
    fills: int = 0
    bytes_hit: int = 0
    bytes_fetched: int = 0
    bytes_streamed: int = 0
    evictions: int = 0
    bytes_evicted: int = 0
    corrupt: int = 0

    def add(self, **deltas: int) -> None:
        """Add ``deltas`` to the named counters."""
        for name, delta in deltas.items():
            setattr(self, name, getattr(self, name) + delta)

    @property
    def hit_rate(self) -> float:
        """Hits over all acquisitions (0 when none)."""
        total = self.hits + self.misses + self.streams
        return self.hits / total if total else 0.0

    @classmethod
    def from_counters(cls, counters: dict[str, int]) -> CacheMetrics:
        """Build from the index's counter table (unknown names are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in counters.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the hit rate."""
        return {**asdict(self), "hit_rate": self.hit_rate}


@dataclass(frozen=True)
class CacheStatus:
    """What ``quarry cache status`` prints.

    :param capacity_bytes: configured capacity, bytes.
    :param used_bytes: bytes of local objects plus reservations of fills in progress.
    :param objects: local objects.
    :param preparing: fills in progress (or orphaned by a dead process).
    :param pinned: objects pinned by at least one holder.
    :param free_disk_bytes: free space on the cache's filesystem, bytes.
    :param effective_capacity_bytes: what the cache can really hold, bytes: the configured
        capacity, or less when the disk cannot hold that much (used + free - min_free).
    :param metrics: node-wide counters since the cache was created.
    """

    root: str
    capacity_bytes: int
    used_bytes: int
    objects: int
    preparing: int
    pinned: int
    free_disk_bytes: int
    effective_capacity_bytes: int
    metrics: CacheMetrics = field(default_factory=CacheMetrics)

    @property
    def capacity_warning(self) -> str | None:
        """A line for the user when the disk cannot hold the configured capacity."""
        if self.effective_capacity_bytes >= self.capacity_bytes:
            return None
        return (
            f"the cache's capacity ({self.capacity_bytes} bytes) is more than its disk can hold; "
            f"the effective cap is {self.effective_capacity_bytes} bytes (used + free disk)"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = asdict(self)
        data["metrics"] = self.metrics.to_dict()
        data["capacity_warning"] = self.capacity_warning
        return data
