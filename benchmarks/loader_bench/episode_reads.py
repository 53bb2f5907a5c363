"""Real episodes on the remote path (moto's S3 on loopback): the node cache against streaming,
sample reads, and a pinned model trained on loader batches."""

from __future__ import annotations

import gc
import hashlib
import io
import logging
import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from moto.server import ThreadedMotoServer
from pinned import BUCKET, MB, META, SPEC, Params
from torch import nn
from torch.utils.data import DataLoader

from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions, write_episode
from loader import CacheConfig, LoaderConfig, NodeCache, ObjectRef, ObjectStore, StoreConfig
from loader.assemble import SampleSource
from loader.dataset import BatchStream, ManifestIterableDataset, seed_worker
from loader.sampler import EpochSampler
from loader.warm import manifest_refs, warm_cache
from manifests import build_manifest
from manifests import open_manifest as open_mmap
from trainer.goodput import GcPauses

Note = Callable[[str, dict[str, Any]], dict[str, Any]]


@dataclass
class Corpus:
    """Episodes in moto's S3 and a manifest over them."""

    manifest: Path
    store: StoreConfig
    refs: list[ObjectRef]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_corpus(p: Params, folder: Path, endpoint: str) -> Corpus:
    store = StoreConfig(
        s3_endpoint_url=endpoint, s3_key="bench", s3_secret="bench", s3_region="us-east-2"
    )
    fs, _ = ObjectStore(store).filesystem(f"s3://{BUCKET}")
    fs.mkdir(BUCKET)
    fleet = FleetConfig(
        width=p.width,
        height=p.height,
        cameras=p.cameras,
        duration_s=(p.duration_s, p.duration_s),
        fault_rate=0.0,
    )
    rows = []
    for index in range(p.episodes):
        episode = synth_episode(p.seed, index, fleet)
        blob = io.BytesIO()
        write_episode(episode, blob, WriteOptions(window_s=p.window_s))
        data = blob.getvalue()
        uri = f"s3://{BUCKET}/episodes/{episode.episode_id}.mcap"
        fs.pipe_file(uri.removeprefix("s3://"), data)
        rows.append(
            {
                "episode_id": episode.episode_id,
                "uri": uri,
                "start_ns": episode.start_ns,
                "end_ns": episode.end_ns,
                "num_samples": SPEC.count_samples(episode.start_ns, episode.end_ns),
                "size_bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    info = build_manifest(pa.Table.from_pylist(rows), META, folder / "episodes")
    return Corpus(info.path, store, manifest_refs(open_mmap(info.path)))


def read_objects(cache: NodeCache, refs: list[ObjectRef], block: int) -> float:
    """Seconds to read every object whole through ``cache`` (hits, or streams)."""
    started = time.perf_counter()
    for ref in refs:
        with cache.acquire(ref) as lease, lease.open() as handle:
            while handle.read(block):
                pass
    return time.perf_counter() - started


def read_samples(source: SampleSource, samples: list[int]) -> tuple[float, int]:
    """Seconds to read ``samples`` in this process, and the container bytes the readers read."""
    started = time.perf_counter()
    for sample in samples:
        source.read(sample)
    seconds = time.perf_counter() - started
    read = sum(e.reader.bytes_read for e in source.process.readers.values())
    source.close()
    return seconds, read


def measure_cache(p: Params, corpus: Corpus, folder: Path) -> dict[str, float]:
    block = int(p.block_mb * 2**20)
    store = ObjectStore(corpus.store.model_copy(update={"block_bytes": block}))
    hits = NodeCache(CacheConfig(root=folder / "cache", copy_block_bytes=block), store)
    warm = warm_cache(hits, corpus.refs)
    remote = NodeCache(CacheConfig(root=folder / "nocache", capacity_bytes=1), store)
    total = sum(r.size for r in corpus.refs) / MB
    hit_s = min(read_objects(hits, corpus.refs, block) for _ in range(p.hit_passes))
    remote_s = read_objects(remote, corpus.refs, block)
    assert remote.status().metrics.streams == len(corpus.refs)
    raw_s = min(_raw_read(hits, corpus.refs, block) for _ in range(p.hit_passes))
    samples = _pick(open_mmap(corpus.manifest).num_samples, p.sample_reads, p.seed)
    config = LoaderConfig(cache=hits.config, store=store.config, open_readers=p.episodes)
    hit_sample_s, hit_bytes = read_samples(SampleSource(corpus.manifest, config), samples)
    stream = config.model_copy(update={"cache": remote.config})
    remote_sample_s, _ = read_samples(SampleSource(corpus.manifest, stream), samples)
    return {
        "objects_mb": total,
        "fill_mb_s": warm.bytes_fetched / MB / warm.seconds,
        "hit_mb_s": total / hit_s,
        "remote_mb_s": total / remote_s,
        "cache_speedup": remote_s / hit_s,
        "cache_sample_speedup": remote_sample_s / hit_sample_s,
        "samples_per_s": len(samples) / hit_sample_s,
        "loader_mb_s": hit_bytes / MB / hit_sample_s,
        "raw_read_mb_s": total / raw_s,
        "bytes_fraction_of_raw": (hit_bytes / hit_sample_s) / (total * MB / raw_s),
    }


def _raw_read(cache: NodeCache, refs: list[ObjectRef], block: int) -> float:
    started = time.perf_counter()
    for ref in refs:
        with cache.object_path(ref.sha256).open("rb") as handle:
            while handle.read(block):
                pass
    return time.perf_counter() - started


def _pick(num_samples: int, count: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    picks = rng.choice(num_samples, size=min(count, num_samples), replace=False)
    return [int(x) for x in picks]


class PinnedPolicy(nn.Module):
    """Frames of every camera (stacked on channels) through a strided CNN, the state window
    through an MLP, and a head that predicts the action chunk."""

    def __init__(self, p: Params, state: tuple[int, int], actions: tuple[int, int]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3 * SPEC.frames_per_camera * len(p.cameras)
        for out in p.model_channels:
            layers += [nn.Conv2d(channels, out, 3, stride=2, padding=1), nn.ReLU()]
            channels = out
        self.vision = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.state = nn.Sequential(nn.Flatten(), nn.Linear(state[0] * state[1], 128), nn.ReLU())
        self.head = nn.Sequential(
            nn.Linear(channels + 128, 256), nn.ReLU(), nn.Linear(256, actions[0] * actions[1])
        )
        self.actions = actions

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        frames = torch.cat([batch["frames"][c] for c in sorted(batch["frames"])], dim=1)
        x = frames.permute(0, 1, 4, 2, 3).flatten(1, 2).float() / 255.0  # [B, F*C*3, H, W]
        embedding = torch.cat([self.vision(x), self.state(batch["state"])], dim=1)
        out: torch.Tensor = self.head(embedding)
        return out.view(-1, *self.actions)


def measure_loop(p: Params, corpus: Corpus, folder: Path) -> dict[str, Any]:
    """Train the pinned model on loader batches; wait vs compute after warm-up."""
    torch.manual_seed(p.seed)
    torch.set_num_threads(p.model_threads)
    config = LoaderConfig(
        cache=CacheConfig(root=folder / "cache"), store=corpus.store, batch_size=p.batch_size
    )
    manifest = open_mmap(corpus.manifest)
    sampler = EpochSampler(manifest.num_samples, manifest.index.row_offsets(), seed=p.seed)
    dataset = ManifestIterableDataset(corpus.manifest, config, sampler)
    loader = DataLoader(
        dataset,
        batch_size=None,
        num_workers=p.workers,
        prefetch_factor=p.prefetch_factor,
        worker_init_fn=seed_worker,
    )
    load_before = os.getloadavg()[0]
    with _frozen_heap() as pauses, BatchStream(loader, prefetch=p.stream_batches) as batches:
        loop = _train(p, batches)
    waits, computes = loop.waits, loop.computes
    wait, compute, release = sum(waits), sum(computes), sum(loop.releases)
    return {
        "data_wait_fraction": wait / (wait + compute),
        # what the wait was when the previous batch was released inside next() (before)
        "data_wait_fraction_with_release": (wait + release) / (wait + compute),
        "release_ms_median": 1e3 * statistics.median(loop.releases),
        "step_ms": 1e3 * (wait + compute) / len(waits),
        "wait_ms_median": 1e3 * statistics.median(waits),
        "wait_ms_p90": 1e3 * float(np.percentile(waits, 90)),
        "wait_ms_max": 1e3 * max(waits),
        "loop_samples_per_s": p.batch_size * len(waits) / (wait + compute),
        "model_samples_per_s": p.batch_size * len(computes) / compute,
        "model_parameters": loop.parameters,
        "load_average_1m": [load_before, os.getloadavg()[0]],
        "gc_pause_ms": pauses.seconds * 1e3,
        "gc_pauses": pauses.count,
        "gc_full_collections": pauses.full,
        "gc_longest_pause_ms": pauses.longest_s * 1e3,
    }


@contextmanager
def _frozen_heap() -> Iterator[GcPauses]:
    """What this process allocated so far (manifests, pyarrow, torch) leaves the collector's
    generations, so a full collection does not stall a step for a second; the pauses that
    remain are added up."""
    gc.collect()
    gc.freeze()
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(pauses)
        gc.unfreeze()


@dataclass
class _Loop:
    """Per step after the warm-up: seconds blocked in ``next()``, computing (the release
    included), and releasing the batch."""

    waits: list[float]
    computes: list[float]
    releases: list[float]
    parameters: int


def _train(p: Params, batches: BatchStream) -> _Loop:
    """Train ``warmup_steps + steps`` steps on ``batches``. A step ends by dropping its batch
    (its shared memory is released then), as the trainer's does, so the wait is only the time
    the loop is blocked on the next batch; the release is timed on its own too."""
    loop = _Loop([], [], [], 0)
    model: PinnedPolicy | None = None
    optimizer: torch.optim.Optimizer | None = None
    for step in range(p.warmup_steps + p.steps):
        started = time.perf_counter()
        batch = next(batches)
        got = time.perf_counter()
        if model is None or optimizer is None:
            shapes = (tuple(batch["state"].shape[1:]), tuple(batch["actions"].shape[1:]))
            model = PinnedPolicy(p, *shapes)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss = nn.functional.mse_loss(model(batch), batch["actions"])
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        stepped = time.perf_counter()
        del batch, loss
        if step >= p.warmup_steps:
            loop.waits.append(got - started)
            loop.computes.append(time.perf_counter() - got)
            loop.releases.append(time.perf_counter() - stepped)
    assert model is not None
    loop.parameters = sum(x.numel() for x in model.parameters())
    return loop


def measure_loader(p: Params, folder: Path, note: Note) -> dict[str, Any]:
    """The cache and training-loop figures, on episodes in a moto S3 server started here."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        corpus = make_corpus(p, folder, f"http://127.0.0.1:{port}")
        cache = note("cache", measure_cache(p, corpus, folder))
        return {**cache, **note("loop", measure_loop(p, corpus, folder))}
    finally:
        server.stop()
