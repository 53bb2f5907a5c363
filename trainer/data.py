"""The data side of the loop: the loader's sampler, dataset and node cache, for one rank.

The rank's :class:`~loader.sampler.EpochSampler` fixes which samples it reads, in which order,
epoch after epoch; the loader's iterable dataset assembles whole batches in DataLoader workers
through the node-local cache. A sample counts as consumed when the step that used it is done
(:meth:`DataFeed.consumed`), so the sampler's state, saved in every checkpoint, resumes exactly
after the last step kept, whatever the workers had prefetched.

A background thread per epoch (:class:`~loader.dataset.BatchStream` with
``data.stream_batches``) takes batches off the workers' result queue while the step computes,
so a step waits for data only when the loader falls behind (:class:`Fetch` says how long).
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from torch.utils.data import DataLoader

from loader.assemble import SampleSource
from loader.cache import NodeCache
from loader.dataset import (
    BatchStream,
    ManifestIterableDataset,
    batch_positions,
    collate_samples,
    seed_worker,
)
from loader.metrics import CacheMetrics
from loader.sampler import EpochSampler
from loader.store import ObjectStore
from loader.warm import manifest_refs, warm_cache
from manifests import open_manifest

from .config import TrainerConfig
from .errors import DataError, PreflightError
from .policy import Batch
from .world import World

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fetch:
    """A batch, and what getting it cost the step.

    :param blocked_s: seconds the step was blocked waiting for the batch, seconds.
    :param epoch_start_s: seconds spent starting an epoch's DataLoader workers in this call
        (only when they could not be started ahead), seconds.
    """

    batch: Batch
    blocked_s: float
    epoch_start_s: float

    @property
    def wait_s(self) -> float:
        """All the time the step spent on data, seconds."""
        return self.blocked_s + self.epoch_start_s


class DataFeed:
    """Batches for one rank, with a resumable position.

    :param config: the run's settings (``loader`` and ``data`` sections).
    :param world: this rank's place (rank, node layout).
    :param manifest_path: the node's local manifest copy.
    """

    def __init__(self, config: TrainerConfig, world: World, manifest_path: Path) -> None:
        self.config = config
        self.world = world
        self.manifest_path = manifest_path
        self.manifest = open_manifest(manifest_path)
        #: The manifest's ID (from its file name, ``<id>.arrow``), recorded in checkpoints.
        self.manifest_id = self.manifest.manifest_id
        self._row_offsets = self.manifest.index.row_offsets()
        #: The sampler's block: ``loader.sampler_block``, or a resumed checkpoint's.
        self.block = config.loader.sampler_block
        self.sampler = self._sampler(epoch=0)
        self.cache = NodeCache(config.loader.cache, ObjectStore(config.loader.store))
        self.before_new_epoch: Callable[[], None] | None = None
        self.may_fork: Callable[[], bool] = lambda: True
        self.epochs_started = 0
        self._stream: BatchStream | None = None
        self._next: tuple[EpochSampler, BatchStream] | None = None
        self._cache_start: CacheMetrics | None = None
        self._epoch_start_s = 0.0

    def _sampler(self, epoch: int) -> EpochSampler:
        return EpochSampler(
            self.manifest.num_samples,
            self._row_offsets,
            rank=self.world.rank,
            world_size=self.world.world_size,
            ranks_per_node=self.world.local_world_size,
            seed=self.config.loader.seed,
            epoch=epoch,
            block=self.block,
        )

    def warm_node_share(self) -> dict[str, Any]:
        """Make the node's share of this epoch's containers local (preflight check ``cache``).

        Local ranks take turns under one lock: the first warms, the others find hits.

        :raises PreflightError: a container could not be fetched or failed its checksum.
        """
        refs = manifest_refs(self.manifest, self.sampler.node_rows())
        lock = FileLock(str(self.cache.root / "locks" / f"warm-{self.manifest_path.stem}.lock"))
        with lock:
            report = warm_cache(self.cache, refs)
        if report.failed:
            first = ", ".join(f"{k}: {v}" for k, v in list(report.failed.items())[:3])
            raise PreflightError(
                f"{len(report.failed)} of {report.objects} containers could not be cached: {first}",
                check="cache",
                rank=self.world.rank,
            )
        if report.streamed:
            log.warning("%d containers do not fit in the cache; they stream", report.streamed)
        detail = asdict(report)
        detail.pop("failed")
        return detail

    def probe_batch(self) -> Batch:
        """A batch of one sample (this rank's first), read in this process, for shapes."""
        indices = self.sampler.indices()
        source = SampleSource(self.manifest_path, self.config.loader)
        try:
            item = source.read(int(indices[0]) if len(indices) else 0)
        finally:
            source.close()
        if item is None:
            raise DataError("the probe sample was bad", rank=self.world.rank)
        return collate_samples([item])

    def start(self) -> None:
        """Start reading from the sampler's current position (call after resuming)."""
        self._cache_start = self.cache.status().metrics
        self._stream = self._new_stream(self.sampler)

    def _new_stream(self, sampler: EpochSampler) -> BatchStream:
        if self.before_new_epoch is not None:
            self.before_new_epoch()  # e.g. no checkpoint thread while workers fork
        started = time.perf_counter()
        data = self.config.data
        workers = data.num_workers
        dataset = ManifestIterableDataset(self.manifest_path, self.config.loader, sampler)
        loader = DataLoader(
            dataset,
            batch_size=None,
            num_workers=workers,
            prefetch_factor=data.prefetch_batches if workers else None,
            multiprocessing_context=multiprocessing.get_context(data.start_method)
            if workers
            else None,
            worker_init_fn=seed_worker,
            timeout=data.timeout_s,
            pin_memory=torch.cuda.is_available(),
        )
        stream = BatchStream(loader, prefetch=data.stream_batches)  # forks the workers
        self.epochs_started += 1
        self._epoch_start_s += time.perf_counter() - started
        return stream

    def next_batch(self) -> Fetch:
        """The next non-empty batch, moving to the next epoch when this one is exhausted.

        Near the end of an epoch the next epoch's workers are started, so they have batches
        ready when it begins (starting workers and opening containers takes a while); that
        waits while ``may_fork()`` is false (a checkpoint thread is writing) unless the epoch
        is over.
        """
        assert self._stream is not None, "call start() first"
        self._epoch_start_s = blocked = 0.0
        while True:
            self._prepare_next_epoch()
            started = time.perf_counter()
            batch = next(self._stream, None)
            blocked += time.perf_counter() - started
            if batch is None:
                self._advance_epoch()
            elif int(batch["sample_index"].shape[0]) > 0:
                return Fetch(batch, blocked, self._epoch_start_s)
            else:
                self.consumed(batch)  # every sample of it was bad and skipped

    def _prepare_next_epoch(self) -> None:
        data = self.config.data
        ahead = data.prefetch_batches * max(1, data.num_workers) + data.stream_batches + 1
        near_end = len(self.sampler) <= ahead * self.config.loader.batch_size
        if self._next is None and near_end and self.may_fork():
            self._start_next_epoch()

    def _start_next_epoch(self) -> None:
        sampler = self._sampler(self.sampler.epoch + 1)
        self._next = (sampler, self._new_stream(sampler))

    def _advance_epoch(self) -> None:
        if self._next is None:
            self._start_next_epoch()
        assert self._next is not None
        self.sampler, self._stream = self._next
        self._next = None

    def consumed(self, batch: Batch) -> None:
        """Record that the step using ``batch`` is done."""
        self.sampler.mark_consumed(batch_positions(batch))

    def state_dict(self) -> dict[str, Any]:
        """The sampler's position (goes into checkpoints)."""
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the sampler's position (before :meth:`start`).

        A run keeps the sample order it started with: a checkpoint written with another
        sampler block (``loader.sampler_block`` changed, or its default, 1 before 8) resumes
        in the checkpoint's block, this epoch and the next ones, with a warning.
        """
        block = state.get("block", 1)  # (a bad one is refused by the sampler it makes)
        if block != self.block:
            log.warning(
                "resuming in the checkpoint's sampler block %d (loader.sampler_block is %d): "
                "a run keeps its sample order",
                block,
                self.block,
            )
            self.block = block
            self.sampler = self._sampler(self.sampler.epoch)
        self.sampler.load_state_dict(state)
        if self._next is not None:  # planned from the position before this one
            self._next[1].close()
            self._next = None

    def cache_counters(self) -> dict[str, int] | None:
        """The node cache's counters since :meth:`start` (all processes of this node)."""
        if self._cache_start is None:
            return None
        now, start = asdict(self.cache.status().metrics), asdict(self._cache_start)
        return {name: int(now[name] - start[name]) for name in now}

    def close(self) -> None:
        """Stop the streams' threads and the workers (this epoch's and the next one's)."""
        streams = [self._stream, self._next[1] if self._next is not None else None]
        self._stream = self._next = None
        for stream in streams:
            if stream is not None:
                stream.close()


def open_feed(config: TrainerConfig, world: World, manifest_path: Path) -> DataFeed:
    """The feed of this rank."""
    return DataFeed(config, world, manifest_path)
