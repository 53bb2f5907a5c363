"""Warm the node-local cache from a manifest: parallel, reporting progress, resumable.

Objects already local are hits and cost one index transaction, so a warm-up that was killed
resumes where it stopped when run again; a fill the killed process left half-written is
adopted and continued from its last byte.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from manifests import Manifest

from ._index import Decision
from .cache import Lease, NodeCache, ObjectRef
from .errors import LoaderError


@dataclass
class WarmReport:
    """What a warm-up did.

    :param objects: distinct objects asked for.
    :param already_local: objects that were local before.
    :param fetched: objects downloaded now.
    :param streamed: objects that did not fit in the cache (they will be streamed).
    :param failed: episode id (or URI) -> error message, for objects that could not be read.
    :param bytes_fetched: object bytes downloaded now.
    :param seconds: wall time, seconds.
    """

    objects: int = 0
    already_local: int = 0
    fetched: int = 0
    streamed: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    bytes_fetched: int = 0
    seconds: float = 0.0


def manifest_refs(manifest: Manifest, rows: npt.ArrayLike | None = None) -> list[ObjectRef]:
    """Distinct containers of ``manifest`` (or of its ``rows``), in row order."""
    table = manifest.table(["episode_id", "uri", "sha256", "size_bytes"])
    if rows is not None:
        table = table.take(np.unique(np.asarray(rows, dtype=np.int64)))
    refs: dict[str, ObjectRef] = {}
    for episode, uri, sha, size in zip(
        table["episode_id"].to_pylist(),
        table["uri"].to_pylist(),
        table["sha256"].to_pylist(),
        table["size_bytes"].to_pylist(),
        strict=True,
    ):
        refs.setdefault(sha, ObjectRef(uri=uri, sha256=sha, size=size, episode_id=episode))
    return list(refs.values())


def warm_cache(
    cache: NodeCache,
    refs: Sequence[ObjectRef],
    *,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> WarmReport:
    """Make ``refs`` local, ``threads`` downloads at a time (default ``warm_threads``).

    Objects warmed stay pinned until the warm-up ends, so a later object of the same warm-up
    never evicts an earlier one: once the cache is full of them, the rest are reported as
    ``streamed``. Per-object failures are collected in the report, not raised.
    ``progress(done, total)`` counts bytes of the objects done.
    """
    started = time.monotonic()
    report = WarmReport(objects=len(refs))
    leases: list[Lease] = []
    total, done = sum(r.size for r in refs), 0
    workers = threads or cache.config.warm_threads
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="quarry-warm") as pool:
            futures = {pool.submit(cache.acquire, ref): ref for ref in refs}
            for future in as_completed(futures):
                ref = futures[future]
                done += ref.size
                if progress is not None:
                    progress(done, total)
                try:
                    lease = future.result()
                except LoaderError as exc:
                    report.failed[ref.episode_id or ref.uri] = str(exc)
                    continue
                leases.append(lease)
                _count(report, lease)
    finally:
        for lease in leases:
            lease.release()
    report.seconds = time.monotonic() - started
    return report


def _count(report: WarmReport, lease: Lease) -> None:
    if lease.outcome is Decision.HIT:
        report.already_local += 1
    elif lease.outcome is Decision.FILL:
        report.fetched += 1
        report.bytes_fetched += lease.ref.size
    else:
        report.streamed += 1
