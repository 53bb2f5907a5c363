"""Bin-packed batches: a run's recordings split into a given number of batches of about equal
cost (longest-processing-time first: dearest recording first, each into the batch lightest at
that moment), so that workers taking one batch at a time finish together (a skewed run cut in
arrival order leaves one worker with the big recordings while the others sit idle).

Why not first-fit decreasing against a capacity: that is bin packing (fewest bins of a
capacity), and it fills the first bins up to the capacity and leaves the rest to the last
ones (measured: 5-16 MB batches for an equal share of 10 MB); batches of equal cost for a
fixed number of workers is multiway partitioning, which this greedy bounds (see
:func:`longest_first`).

A pure function of the items: no DBOS, no database; :func:`pipeline.runs.enqueue_run` uses it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Item:
    """One recording's work: ``key`` (its episode ID), its bytes and its duration, seconds
    (``0`` when unknown before decoding: the bytes alone then weigh it)."""

    key: str
    size_bytes: int
    duration_s: float = 0.0


def costs(items: Sequence[Item], fixed: float = 0.0) -> list[float]:
    """Each item's cost: ``fixed`` (what every recording costs whatever its size: its
    workflow's and steps' records, opening its files), plus its bytes over the mean bytes,
    plus its duration over the mean duration (each term left out when the items have none),
    so bytes and duration weigh alike and an average item costs ``fixed`` + 1 (+ 2 when both
    are known)."""
    if fixed < 0 or not math.isfinite(fixed):
        raise ValueError(f"fixed must be a finite number >= 0, not {fixed!r}")
    if not items:
        return []
    mean_bytes = sum(i.size_bytes for i in items) / len(items)
    mean_dur = sum(i.duration_s for i in items) / len(items)
    out = []
    for item in items:
        cost = item.size_bytes / mean_bytes if mean_bytes > 0 else 0.0
        cost += item.duration_s / mean_dur if mean_dur > 0 else 0.0
        out.append(fixed + (cost if mean_bytes > 0 or mean_dur > 0 else 1.0))
    return out


def longest_first(weights: Sequence[float], count: int) -> list[list[int]]:
    """Indices of ``weights`` split into ``count`` batches of about equal total weight
    (multiway number partitioning by the longest-processing-time-first greedy): heaviest
    first, each into the batch that is lightest at that moment (ties: the lowest batch).

    Bounds (Graham's list-scheduling argument, asserted by tests/pipeline/test_packing.py):
    the heaviest batch weighs at most ``total / count + (1 - 1 / count) * max(weights)``,
    and the heaviest and the lightest batch differ by at most ``max(weights)``; with the items
    sorted first, the heaviest batch is within 4/3 of the best partition's. Every index
    lands exactly once; ``min(count, len(weights))`` batches (none empty); deterministic
    (ties keep input order). Batches come heaviest first, indices in packing order."""
    if count < 1:
        raise ValueError(f"count must be >= 1, not {count!r}")
    for weight in weights:
        if weight < 0 or not math.isfinite(weight):
            raise ValueError(f"a weight must be a finite number >= 0, not {weight!r}")
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    count = min(count, len(weights))
    bins: list[list[int]] = [[] for _ in range(count)]
    heap = [(0.0, b) for b in range(count)]  # (load, batch): the lightest on top
    for i in order:
        load, b = heapq.heappop(heap)
        bins[b].append(i)
        heapq.heappush(heap, (load + weights[i], b))
    loads = {b: load for load, b in heap}
    ranked = sorted(range(count), key=lambda b: (-loads[b], bins[b][0]))
    return [bins[b] for b in ranked]


def pack(items: Sequence[Item], batch_items: int, fixed: float = 0.0) -> list[list[Item]]:
    """``items`` in ``ceil(len(items) / batch_items)`` batches (the number cutting them in
    arrival order would make) of about equal cost (:func:`longest_first` on :func:`costs`
    with ``fixed``); one batch per item, dearest first, when ``batch_items`` is 1."""
    if batch_items < 1:
        raise ValueError(f"batch_items must be >= 1, not {batch_items!r}")
    if not items:
        return []
    weights = costs(items, fixed)
    bins = longest_first(weights, math.ceil(len(items) / batch_items))
    return [[items[i] for i in b] for b in bins]


def in_order(items: Sequence[T], batch_items: int) -> list[list[T]]:
    """``items`` cut in arrival order into batches of ``batch_items`` (what packing does
    better: the benchmark's baseline)."""
    if batch_items < 1:
        raise ValueError(f"batch_items must be >= 1, not {batch_items!r}")
    return [list(items[i : i + batch_items]) for i in range(0, len(items), batch_items)]


def makespan(batches: Sequence[Sequence[float]], workers: int) -> float:
    """When the last of ``workers`` finishes, each taking the next batch (in order) as it
    frees, a batch taking the sum of its items' times."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers!r}")
    free = [0.0] * workers
    for batch in batches:
        w = min(range(workers), key=lambda k: (free[k], k))
        free[w] += sum(batch)
    return max(free)
