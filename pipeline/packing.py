"""Bin-packed batches: a run's recordings packed into batches of about equal cost by first-fit
decreasing, so that workers taking one batch at a time finish together (a skewed run packed
in arrival order leaves one worker with the big recordings while the others sit idle).

A pure function of the items: no DBOS, no database; :func:`pipeline.runs.enqueue_run` uses it.
"""

from __future__ import annotations

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


def first_fit_decreasing(weights: Sequence[float], capacity: float) -> list[list[int]]:
    """Indices of ``weights`` packed into bins of ``capacity``: heaviest first, each into the
    first bin it fits, else a new one. Every index lands exactly once; a bin goes over
    ``capacity`` only when it holds one item that alone does. Ties keep input order, so the
    result is a function of the input. Bins come heaviest first, indices in packing order."""
    if capacity <= 0 or not math.isfinite(capacity):
        raise ValueError(f"capacity must be a positive number, not {capacity!r}")
    for weight in weights:
        if weight < 0 or not math.isfinite(weight):
            raise ValueError(f"a weight must be a finite number >= 0, not {weight!r}")
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    bins: list[list[int]] = []
    loads: list[float] = []
    for i in order:
        for b, load in enumerate(loads):
            if load + weights[i] <= capacity:
                bins[b].append(i)
                loads[b] += weights[i]
                break
        else:
            bins.append([i])
            loads.append(weights[i])
    ranked = sorted(range(len(bins)), key=lambda b: (-loads[b], bins[b][0]))
    return [bins[b] for b in ranked]


def pack(items: Sequence[Item], batch_items: int, fixed: float = 0.0) -> list[list[Item]]:
    """``items`` in ``ceil(len(items) / batch_items)`` batches of about equal cost (first-fit
    decreasing on :func:`costs` with ``fixed``): the capacity starts at the mean batch's cost
    and grows by 2 % until first-fit decreasing needs no more batches than that (an item
    dearer than the capacity gets a batch of its own); one batch per item when
    ``batch_items`` is 1."""
    if batch_items < 1:
        raise ValueError(f"batch_items must be >= 1, not {batch_items!r}")
    if not items:
        return []
    weights = costs(items, fixed)
    if batch_items == 1:
        return [[items[i]] for i in sorted(range(len(items)), key=lambda i: (-weights[i], i))]
    count = math.ceil(len(items) / batch_items)
    capacity = max(sum(weights) / count, 1e-12)
    bins = first_fit_decreasing(weights, capacity)
    while len(bins) > count:
        capacity *= 1.02
        bins = first_fit_decreasing(weights, capacity)
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
