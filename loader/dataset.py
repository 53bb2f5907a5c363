"""torch datasets over a manifest: map-style and iterable, safe under DataLoader workers.

Both pickle a manifest path and a configuration (never the table): each worker re-opens the
memory map, the cache index and its episode readers on first use. Batches are dicts of
tensors (see :func:`collate_samples`); :class:`BatchStream` iterates a DataLoader, optionally
taking batches off it in a background thread, and stops its workers as soon as iteration ends,
even on an error.
"""

from __future__ import annotations

import os
import random
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from .assemble import Item, SampleSource
from .config import LoaderConfig
from .errors import LoaderError
from .sampler import EpochSampler

Batch = dict[str, Any]


def collate_samples(items: Sequence[Item | None]) -> Batch:
    """Stack samples (numpy arrays or tensors) into a batch; ``None`` items (skipped bad
    samples) are dropped and counted.

    Returns ``frames`` {camera topic: uint8 [B, F, H, W, 3]}, ``frame_valid`` {camera: bool
    [B, F]}, ``state`` float32 [B, Hs, Ds], ``state_valid`` bool [B, Hs], ``actions`` float32
    [B, Ha, Da], ``action_valid`` bool [B, Ha], ``sample_index`` int64 [B] and ``bad_samples``
    (int, items dropped).
    """
    good = [item for item in items if item is not None]
    batch: Batch = {"bad_samples": len(items) - len(good)}
    if not good:
        batch["sample_index"] = torch.zeros(0, dtype=torch.int64)
        return batch
    cameras = sorted(good[0]["frames"])
    if any(sorted(item["frames"]) != cameras for item in good):
        raise LoaderError("samples of one batch have different cameras")
    for key in ("frames", "frame_valid"):
        batch[key] = {cam: _stack([i[key][cam] for i in good]) for cam in cameras}
    for key in ("state", "state_valid", "actions", "action_valid"):
        batch[key] = _stack([item[key] for item in good])
    batch["sample_index"] = torch.tensor([item["sample_index"] for item in good], dtype=torch.int64)
    return batch


def _stack(values: list[Any]) -> torch.Tensor:
    return torch.stack([torch.as_tensor(v) for v in values])


def as_tensors(item: Item) -> Item:
    """``item`` with its arrays as tensors over the same memory (no copy), in a dict that
    pickles them as one storage.

    A DataLoader worker hands a tensor to the training process through shared memory: one
    segment (a file descriptor sent and mapped) per tensor, about 0.15 ms of the training
    process's CPU each; numpy arrays it pickles through a pipe. With 2 workers and a trivial
    dataset, 7.4 MB items (4 cameras x 2 frames at 640x480) crossed at 57-62 samples/s as
    numpy arrays; 1 MB items (3 cameras at 320x180) at 902/s as one tensor, 282/s as ten and
    488-635/s as numpy. So an item that is pickled (in a worker) copies its arrays into one
    storage (64-byte aligned) and travels as that storage and the views' layout: one segment
    per item; the training process gets a plain dict of views of it.
    """
    out = _TensorItem()
    for key, value in item.items():
        if isinstance(value, dict):
            out[key] = {name: torch.from_numpy(array) for name, array in value.items()}
        elif isinstance(value, np.ndarray):
            out[key] = torch.from_numpy(value)
        else:
            out[key] = value
    return out


class _TensorItem(dict[str, Any]):
    """An item of tensors that pickles as one storage (see :func:`as_tensors`)."""

    def __reduce__(self) -> tuple[Any, ...]:
        tensors = [
            (key, name, tensor)
            for key, value in self.items()
            if isinstance(value, (dict, torch.Tensor))
            for name, tensor in (value.items() if isinstance(value, dict) else [(None, value)])
        ]
        layout, total = [], 0
        for key, name, tensor in tensors:
            size = tensor.numel() * tensor.element_size()
            layout.append((key, name, tensor.dtype, tuple(tensor.shape), total, size))
            total += -(-size // _ALIGN) * _ALIGN
        storage = torch.empty(total, dtype=torch.uint8)
        for (*_, tensor), (*_, kind, shape, start, size) in zip(tensors, layout, strict=True):
            storage[start : start + size].view(kind).view(shape).copy_(tensor)
        plain = {k: v for k, v in self.items() if not isinstance(v, (dict, torch.Tensor))}
        if total < INLINE_BYTES:  # the bytes themselves cost less than a segment
            return (_views, (storage.numpy(), layout, plain))
        return (_views, (storage, layout, plain))


#: Items smaller than this pickle their bytes inline rather than through shared memory:
#: 147 kB items (2 cameras x 2 frames at 128x96) crossed 2 workers at 2,301-3,270/s as numpy
#: arrays and 1,212-1,394/s as one shared tensor; 1 MB ones at 468-588 and 722-805.
INLINE_BYTES = 256 * 1024


def _views(storage: torch.Tensor | np.ndarray, layout: list[Any], plain: dict[str, Any]) -> Item:
    """The item of ``layout`` (key, name, dtype, shape, byte offset, bytes) over ``storage``
    (uint8), with the non-tensor values ``plain``."""
    if isinstance(storage, np.ndarray):
        storage = torch.from_numpy(storage)
    out: Item = dict(plain)
    for key, name, kind, shape, start, size in layout:
        tensor = storage[start : start + size].view(kind).view(shape)
        if name is None:
            out[key] = tensor
        else:
            out.setdefault(key, {})[name] = tensor
    return out


#: Alignment of each array in an item's storage, bytes (any element type's size divides it).
_ALIGN = 64


def batch_positions(batch: Batch) -> int:
    """Sampler positions a batch covers (samples delivered plus samples skipped as bad):
    what to pass to :meth:`EpochSampler.mark_consumed` once the step is done."""
    return int(batch["sample_index"].shape[0]) + int(batch["bad_samples"])


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed Python's and numpy's generators from torch's per-worker seed."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


class ManifestDataset(Dataset[Item | None]):
    """Map-style: item ``i`` is global sample ``i`` of the manifest, its arrays as tensors
    (see :func:`as_tensors`).

    Use with ``DataLoader(ds, sampler=EpochSampler(...), batch_size=..., collate_fn=
    collate_samples, worker_init_fn=seed_worker)``. Items are ``None`` for bad samples skipped
    under ``bad_episode="skip_and_count"``.
    """

    def __init__(self, manifest_path: str | os.PathLike[str], config: LoaderConfig) -> None:
        self.source = SampleSource(manifest_path, config)

    def __len__(self) -> int:
        return self.source.num_samples

    def __getitem__(self, index: int) -> Item | None:
        item = self.source.read(int(index))
        return None if item is None else as_tensors(item)


class ManifestIterableDataset(IterableDataset[Batch]):
    """Iterable: yields this rank's whole batches in the sampler's order.

    Batch ``b`` (samples ``b * B`` to ``(b + 1) * B`` of the rank's remaining sequence) is
    built by worker ``b % num_workers``; a DataLoader yields worker batches in order, so
    the batches arrive in sampler order and ``mark_consumed(batch_positions(batch))`` after
    each step keeps the sampler's count exact. Use with ``DataLoader(ds, batch_size=None,
    num_workers=..., worker_init_fn=seed_worker)``.
    """

    def __init__(
        self,
        manifest_path: str | os.PathLike[str],
        config: LoaderConfig,
        sampler: EpochSampler,
    ) -> None:
        self.source = SampleSource(manifest_path, config)
        self.sampler = sampler
        self.batch_size = config.batch_size
        if sampler.num_samples != self.source.num_samples:
            message = (
                f"sampler has {sampler.num_samples} samples, the manifest {self.source.num_samples}"
            )
            raise LoaderError(message)

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        indices = self.sampler.indices()
        size = self.batch_size
        for start in range(worker * size, len(indices), workers * size):
            chunk = indices[start : start + size].tolist()
            yield collate_samples([self.source.read(i) for i in chunk])


class BatchStream:
    """Iterates ``loader``, optionally ahead of the consumer, and stops its workers as soon as
    iteration ends.

    With ``prefetch`` > 0 a background thread takes batches off the loader (for a DataLoader
    with workers: off its result queue, which includes rebuilding each batch's tensors from
    shared memory, 2-6 ms for a 4.7 MB batch on a busy machine) and keeps up to ``prefetch`` of
    them ready, so the consumer waits only when the loader truly falls behind. An error the
    loader raises reaches the consumer with its type, in order, after the batches before it;
    exhaustion ends the iteration. With ``prefetch`` = 0 each batch is taken in ``next()``.

    Taking a ready batch wakes no thread: the thread tops the stream up by itself within
    ``refill_s`` of a take, and is woken at once only when the consumer took the last ready
    batch. Waking it in ``next()``, as a bounded ``queue.Queue``'s ``get`` does, let the kernel
    switch the consumer out for the woken thread, and on a busy machine the consumer then
    waited its turn for a core: ``next()`` took 1-21 ms with two batches ready in 19 of 160
    steps (load average 4-14 on 2 cores), on 0.05 ms of its own CPU time.

    torch leaves the shutdown of a DataLoader's workers to its iterator's ``__del__``; when
    the iterator ends up in a reference cycle (an error raised through it and kept, a frame
    that holds it), the garbage collector runs that ``__del__`` only after it has finalized
    the workers' queues, and the shutdown then waits 5 s per worker for a stop signal that
    can no longer be sent. A stream stops the workers itself: on the first error (before
    re-raising it), when the loader is exhausted, and on :meth:`close` or leaving its block::

        with BatchStream(loader, prefetch=2) as batches:
            for batch in batches:
                ...

    :param loader: a DataLoader, or any iterable of batches.
    :param prefetch: batches kept ready by the background thread (0: no thread).
    :param join_s: how long :meth:`close` waits for the thread to finish the batch it is
        taking, seconds; after that the workers are stopped under it.
    :param refill_s: how often the thread looks for room while ``prefetch`` batches are
        ready, seconds.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        *,
        prefetch: int = 0,
        join_s: float = 2.0,
        refill_s: float = 0.01,
    ) -> None:
        if prefetch < 0:
            raise LoaderError(f"prefetch must be >= 0, got {prefetch}")
        if refill_s <= 0:
            raise LoaderError(f"refill_s must be > 0, got {refill_s}")
        self._iterator: Iterator[Any] | None = iter(loader)
        self._join_s = join_s
        self._ready: _Ready | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        if prefetch:
            self._ready = _Ready(prefetch, refill_s, self._stop)
            self._thread = threading.Thread(
                target=_produce,
                args=(self._iterator, self._ready),
                name="batch-stream",
                daemon=True,
            )
            self._thread.start()
            # The thread holds no reference to the stream: a stream dropped unclosed stops it.
            weakref.finalize(self, self._ready.stop)

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> Any:
        if self._iterator is None:
            raise StopIteration
        try:
            item = next(self._iterator) if self._ready is None else self._take()
        except BaseException:
            self.close()
            raise
        if isinstance(item, _Ended):
            self.close()
            if item.error is not None:
                raise item.error
            raise StopIteration
        return item

    def _take(self) -> Any:
        assert self._ready is not None and self._thread is not None
        thread = self._thread
        return self._ready.take(lambda: not thread.is_alive())

    def close(self) -> None:
        """Stop the thread and the worker processes now (idempotent); the stream then yields
        nothing more. Batches taken ahead are dropped."""
        iterator, self._iterator = self._iterator, None
        if iterator is None:
            return
        self._stop.set()
        if self._ready is not None:
            self._ready.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._join_s)
            if thread.is_alive() and _has_workers(iterator):  # a slow or hung worker
                _stop_workers(iterator)
                thread.join(self._join_s)
            elif thread.is_alive():
                # No worker processes: the thread assembles the batch itself (decoding in
                # native code). Let it finish that batch: a thread left inside native code
                # when the interpreter exits aborts the process ("terminate called without an
                # active exception"), seen with num_workers=0 on a loaded machine.
                thread.join(_IN_PROCESS_JOIN_S)
        if thread is None:
            _stop_workers(iterator)
        if self._ready is not None:
            self._ready.drain()

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_POLL_S = 0.1
"""How often a blocked stream thread or consumer looks at the stop event and the other side."""


@dataclass(frozen=True)
class _Ended:
    """The stream thread's last item: the loader was exhausted, or raised ``error``."""

    error: BaseException | None = None


class _Ready:
    """Batches taken ahead: a deque that one thread fills and one consumer empties.

    ``take`` pops without a lock or a wake-up while batches are ready; the filling thread
    polls for room every ``refill_s`` and is woken only when the consumer took the last one.
    """

    def __init__(self, limit: int, refill_s: float, stopped: threading.Event) -> None:
        self.limit, self.refill_s = limit, refill_s
        self.stopped = stopped
        self.items: deque[Any] = deque()
        self.arrived = threading.Event()  # set by the thread after each put
        self.room = threading.Event()  # set by the consumer when it took the last item

    def wait_for_room(self) -> bool:
        """Block until fewer than ``limit`` items are ready; ``False`` if stopped first."""
        while not self.stopped.is_set():
            if len(self.items) < self.limit:
                return True
            self.room.wait(self.refill_s)
            self.room.clear()  # the length is checked again after this: no lost wake-up
        return False

    def put(self, item: Any) -> None:
        self.items.append(item)
        self.arrived.set()
        if self.stopped.is_set():  # closed while the item was being taken: nobody will
            self.items.clear()

    def take(self, ended: Callable[[], bool]) -> Any:
        """The oldest item, waiting for one; an ``_Ended`` error if ``ended()`` first."""
        while True:
            try:
                item = self.items.popleft()
            except IndexError:
                if ended() and not self.items:
                    return _Ended(LoaderError("the batch stream's thread ended without a result"))
                self.arrived.wait(_POLL_S)
                self.arrived.clear()  # popped again after this: no lost wake-up
                continue
            if not self.items:
                self.room.set()
            return item

    def stop(self) -> None:
        self.stopped.set()
        self.room.set()

    def drain(self) -> None:
        self.items.clear()


def _produce(iterator: Iterator[Any], ready: _Ready) -> None:
    """The stream thread: take batches from ``iterator`` into ``ready`` until it ends or the
    stream stops; the workers are stopped before the end (or the error) is handed over."""
    ended = _Ended()
    try:
        while ready.wait_for_room():
            ready.put(next(iterator))
    except StopIteration:
        pass
    except BaseException as exc:  # handed to the consumer, which re-raises it
        ended = _Ended(exc)
    finally:
        _stop_workers(iterator)
    if not ready.stopped.is_set():
        ready.put(ended)


_IN_PROCESS_JOIN_S = 300.0
"""How long :meth:`BatchStream.close` waits for a batch assembled in the stream's own thread."""


def _has_workers(iterator: Iterator[Any]) -> bool:
    """Whether ``iterator`` takes its batches from worker processes (a DataLoader's)."""
    return int(getattr(iterator, "_num_workers", 0) or 0) > 0


def _stop_workers(iterator: Iterator[Any]) -> None:
    # torch's own shutdown (what the iterator's __del__ calls): sets the workers' done event,
    # sends each its stop signal and joins it; a no-op once done, or for a plain iterator.
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
