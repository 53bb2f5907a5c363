"""The server loop both sides of the peer benchmark run (torch and numpy; both venvs).

A server holds one system's map-style dataset (item = one training sample, by the system's
own key). For each request line ``{"mode", "keys", "batch"}`` it reads those keys in that
order, in this process or through one persistent torch DataLoader with 2 workers (batches of
``batch`` consecutive keys, each built by one worker, left uncollated), and answers one line:
wall seconds, per-sample latencies (ms; in the workers mode a batch's time since the one
before, divided among its samples), CPU seconds of this process and its workers, and the
peak RSS (MB) of this process and of its largest worker.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from rigs import WORKERS, peak_rss_mb, proc_cpu_seconds, send
from torch.utils.data import DataLoader, Dataset, Sampler


class Keys(Sampler[int]):
    """The keys of the current request, in order (the DataLoader re-reads it each block)."""

    def __init__(self) -> None:
        self.keys: list[int] = []

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.keys))

    def __len__(self) -> int:
        return len(self.keys)


def as_list(batch: list[Any]) -> list[Any]:
    """collate_fn: the batch's items as a list (each system's own items, unchanged)."""
    return batch


def serve(
    dataset: Dataset[Any], touch: Callable[[Any], None], before_fork: Callable[[], None]
) -> None:
    """Answer request lines on stdin until EOF or ``{"op": "quit"}``.

    :param touch: forces an item's lazy parts (e.g. PIL images) so every system pays for
        its whole sample; called in the reading process.
    :param before_fork: runs once before the DataLoader's workers fork (a peer's caveat).
    """
    # One torch thread, as in a DataLoader worker: on a shared machine torch's default pool
    # (one thread per core) spins against the other processes.
    torch.set_num_threads(1)
    keys = Keys()
    loader: DataLoader[Any] | None = None
    send({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        keys.keys = [int(k) for k in request["keys"]]
        if request["mode"] == "process":
            answer = _read_here(dataset, keys.keys, touch)
        else:
            if loader is None:
                before_fork()
                loader = DataLoader(
                    dataset,
                    batch_size=int(request.get("batch", 1)),
                    sampler=keys,
                    num_workers=WORKERS,
                    persistent_workers=True,
                    collate_fn=as_list,
                    prefetch_factor=2,
                )
            answer = _read_workers(loader, touch)
        send(answer)


def _read_here(
    dataset: Dataset[Any], keys: list[int], touch: Callable[[Any], None]
) -> dict[str, Any]:
    latencies = []
    cpu0, start = time.process_time(), time.perf_counter()
    for key in keys:
        began = time.perf_counter()
        touch(dataset[key])
        latencies.append((time.perf_counter() - began) * 1e3)
    return {
        "seconds": time.perf_counter() - start,
        "latencies_ms": latencies,
        "cpu_s": time.process_time() - cpu0,
        "rss_mb": peak_rss_mb(os.getpid()),
    }


def _read_workers(loader: DataLoader[Any], touch: Callable[[Any], None]) -> dict[str, Any]:
    cpu0, start = time.process_time(), time.perf_counter()
    iterator = iter(loader)
    pids = [w.pid for w in getattr(iterator, "_workers", [])]
    worker_cpu0 = sum(proc_cpu_seconds(p) for p in pids)
    latencies, last = [], start
    for batch in iterator:
        for item in batch:
            touch(item)
        now = time.perf_counter()
        latencies += [(now - last) * 1e3 / len(batch)] * len(batch)
        last = now
    seconds = time.perf_counter() - start
    worker_cpu = sum(proc_cpu_seconds(p) for p in pids) - worker_cpu0
    return {
        "seconds": seconds,
        "latencies_ms": latencies,
        "cpu_s": time.process_time() - cpu0 + worker_cpu,
        "rss_mb": max([peak_rss_mb(os.getpid()), *(peak_rss_mb(p) for p in pids)]),
    }
