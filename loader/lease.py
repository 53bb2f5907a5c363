"""What the cache hands out: references to objects, and leases on their local copies."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO

from ._index import Decision
from .errors import CacheError

if TYPE_CHECKING:
    from .cache import NodeCache

_KEY = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ObjectRef:
    """An object the cache can hold: where it lies, its SHA-256 (the cache key) and size.

    :param size: object size, bytes.
    :param episode_id: the episode it holds, for error messages.
    """

    uri: str
    sha256: str
    size: int
    episode_id: str | None = None


def check_ref(ref: ObjectRef) -> None:
    """Refuse a reference whose key is not a hex SHA-256 or whose size is negative.

    :raises CacheError: the reference cannot name a cache object.
    """
    if not _KEY.match(ref.sha256):
        raise CacheError(
            "cache key must be 64 lowercase hex digits", uri=ref.uri, key=ref.sha256[:80]
        )
    if ref.size < 0:
        raise CacheError(f"negative object size {ref.size}", uri=ref.uri, key=ref.sha256)


class Lease:
    """Use of one object: local (pinned against eviction until released) or streamed."""

    def __init__(
        self, cache: NodeCache, ref: ObjectRef, path: Path | None, outcome: Decision
    ) -> None:
        self.cache = cache
        self.ref = ref
        self.path = path
        self.outcome = outcome
        """How the lease was served: ``hit``, ``fill`` (downloaded now) or ``stream``."""
        self._released = path is None

    @property
    def streamed(self) -> bool:
        """Whether reads go to the object store (the object did not fit in the cache)."""
        return self.path is None

    def open(self) -> BinaryIO:
        """A binary reader over the object: the local file, or a bounded read-ahead stream."""
        if self.path is None:
            return self.cache.store.open(self.ref.uri)
        return self.path.open("rb")

    def release(self) -> None:
        """Unpin the object (idempotent)."""
        if not self._released:
            self._released = True
            self.cache._unpin(self.ref.sha256)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
