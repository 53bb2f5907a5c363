"""Assemble training samples: global sample number -> manifest row -> cached container -> Sample.

:class:`SampleSource` holds everything a process needs (the memory-mapped manifest, the cache,
open episode readers) and builds it lazily in each process, so it is safe to fork and pickles
as a manifest path plus configuration.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from episodes.errors import EpisodeError
from episodes.reader import EpisodeReader
from episodes.sample import Sample
from episodes.spec import SampleSpec
from manifests import Manifest, ManifestRow, open_manifest

from .cache import Lease, NodeCache, ObjectRef
from .config import LoaderConfig
from .errors import BadEpisodeError, ChecksumError, LoaderError, ObjectStoreError
from .store import ObjectStore

log = logging.getLogger(__name__)
Item = dict[str, Any]


@dataclass
class _OpenEpisode:
    lease: Lease
    handle: BinaryIO
    reader: EpisodeReader

    def close(self) -> None:
        self.handle.close()
        self.lease.release()


@dataclass
class _Normalizer:
    """``(x - mean) / std`` per dimension, from the manifest's sums (float32)."""

    mean: npt.NDArray[np.float32]
    std: npt.NDArray[np.float32]

    def __call__(self, values: npt.NDArray[np.float32], what: str) -> npt.NDArray[np.float32]:
        if values.shape[-1] != self.mean.shape[0]:
            message = f"{what} has {values.shape[-1]} dims, norm_stats {self.mean.shape[0]}"
            raise LoaderError(message)
        return ((values - self.mean) / self.std).astype(np.float32)


class _ProcessState:
    """What one process opened: built on first use after a fork, never pickled.

    :param threads: threads that decode a sample's cameras: a pool of this process's own
        (its threads do not survive a fork), or, for 1, the reading thread itself.
    """

    def __init__(self, path: Path, config: LoaderConfig, threads: int) -> None:
        self.manifest: Manifest = open_manifest(path)
        self.cache = NodeCache(config.cache, ObjectStore(config.store))
        self.readers: OrderedDict[str, _OpenEpisode] = OrderedDict()
        self.bad_samples = 0
        self._last_row: ManifestRow | None = None
        self.decode_pool = (
            ThreadPoolExecutor(threads, thread_name_prefix="quarry-decode") if threads > 1 else None
        )

    def row(self, row: int) -> ManifestRow:
        """Manifest row ``row`` (the last one asked for is kept: a block's samples share it)."""
        if self._last_row is None or self._last_row.row != row:
            self._last_row = self.manifest.row(row)
        return self._last_row


class SampleSource:
    """Reads samples of the manifest at ``manifest_path`` through the node-local cache.

    :param config: cache, store, bad-episode policy, normalization, spec override.
    """

    def __init__(self, manifest_path: str | os.PathLike[str], config: LoaderConfig) -> None:
        self.manifest_path = Path(manifest_path)
        self.config = config
        self._pid = -1
        self._origin_pid = os.getpid()
        self._state: _ProcessState | None = None
        manifest = self.process.manifest
        self.num_samples = manifest.num_samples
        self.spec = SampleSpec.from_dict(config.sample_spec or manifest.sample_spec)
        self._state_norm = self._normalizer(manifest, "state")
        self._action_norm = self._normalizer(manifest, "action")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_state"], state["_pid"] = None, -1
        return state

    @property
    def process(self) -> _ProcessState:
        """This process's manifest map, cache and readers (re-opened after a fork)."""
        if self._state is None or self._pid != os.getpid():
            threads = self._decode_threads()
            self._state = _ProcessState(self.manifest_path, self.config, threads)
            self._pid = os.getpid()
        return self._state

    def _decode_threads(self) -> int:
        """``config.decode_threads``, or where unset: this process's cores in the process
        that made this source, 1 in the processes it was forked or pickled into (DataLoader
        workers, which already decode side by side)."""
        if self.config.decode_threads is not None:
            return self.config.decode_threads
        if os.getpid() != self._origin_pid:
            return 1
        return len(os.sched_getaffinity(0))

    @property
    def bad_samples(self) -> int:
        """Samples this process skipped under the ``skip_and_count`` policy."""
        return self.process.bad_samples

    def _normalizer(self, manifest: Manifest, field: str) -> _Normalizer | None:
        stats = manifest.field_stats(field) if self.config.normalize else None
        if stats is None:
            return None
        return _Normalizer(stats.mean().astype(np.float32), stats.std().astype(np.float32))

    def read(self, sample: int) -> Item | None:
        """Sample ``sample`` as a dict of numpy arrays; ``None`` if skipped as bad.

        :raises BadEpisodeError: its episode cannot be read and the policy is ``fail``.
        """
        row = self.process.row(self.process.manifest.locate(sample)[0])
        offset = sample - row.sample_offset
        anchor_ns = row.start_ns + offset * self.spec.anchor_step_ns
        try:
            return self._to_item(self._read_sample(row, anchor_ns), sample)
        except (EpisodeError, ChecksumError, ObjectStoreError) as exc:
            if isinstance(exc, LoaderError) and exc.retryable:
                raise
            self._bad(row, sample, exc)
            return None

    def _read_sample(self, row: ManifestRow, anchor_ns: int) -> Sample:
        try:
            return self._open(row).reader.read_sample(anchor_ns, self.spec)
        except EpisodeError:
            # The container or its cached copy is bad: a cached copy that no longer hashes
            # to its key is dropped and fetched again once; anything else is the episode's.
            self._close(row.sha256)
            if not self.process.cache.discard(_object_ref(row)):
                raise
        log.warning("cached container of episode %s was corrupt; fetched again", row.episode_id)
        return self._open(row).reader.read_sample(anchor_ns, self.spec)

    def _open(self, row: ManifestRow) -> _OpenEpisode:
        readers = self.process.readers
        episode = readers.get(row.sha256)
        if episode is not None:
            readers.move_to_end(row.sha256)
            return episode
        lease = self.process.cache.acquire(_object_ref(row))
        handle = lease.open()
        try:
            reader = EpisodeReader(
                handle, name=row.uri, keep_chunks=True, decode_pool=self.process.decode_pool
            )
        except BaseException:
            handle.close()
            lease.release()
            raise
        readers[row.sha256] = _OpenEpisode(lease, handle, reader)
        while len(readers) > self.config.open_readers:
            readers.popitem(last=False)[1].close()
        return readers[row.sha256]

    def _close(self, key: str) -> None:
        episode = self.process.readers.pop(key, None)
        if episode is not None:
            episode.close()

    def _bad(self, row: ManifestRow, sample: int, exc: Exception) -> None:
        message = f"cannot read sample {sample}: {type(exc).__name__}: {exc}"
        if self.config.bad_episode == "fail":
            raise BadEpisodeError(message, uri=row.uri, episode_id=row.episode_id) from exc
        self.process.bad_samples += 1
        log.warning("skipping bad sample of episode %s: %s", row.episode_id, message)
        return None

    def _to_item(self, sample: Sample, index: int) -> Item:
        state, actions = sample.state, sample.actions
        if self._state_norm is not None:
            state = self._state_norm(state, "state")
        if self._action_norm is not None:
            actions = self._action_norm(actions, "actions")
        frames, frame_valid = _conform_cameras(sample, self.spec.cameras)
        return {
            "frames": frames,
            "frame_valid": frame_valid,
            "state": state,
            "state_valid": sample.state_valid,
            "actions": actions,
            "action_valid": sample.action_valid,
            "sample_index": index,
        }

    def close(self) -> None:
        """Close this process's readers and release their leases."""
        if self._state is not None and self._pid == os.getpid():
            for key in list(self._state.readers):
                self._close(key)


def _conform_cameras(
    sample: Sample, cameras: tuple[str, ...] | None
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, npt.NDArray[np.bool_]]]:
    """Exactly the spec's cameras, so every sample of a manifest has the same keys: a camera
    the episode lacks becomes black frames (shaped like the episode's first camera) that are
    all invalid. Without a camera list, the episode's own cameras."""
    if cameras is None:
        return sample.frames, sample.frame_valid
    if not sample.frames:
        raise LoaderError("the episode has none of the manifest's cameras")
    template = next(iter(sample.frames.values()))
    frames = {c: sample.frames.get(c, np.zeros_like(template)) for c in cameras}
    valid = {
        c: sample.frame_valid.get(c, np.zeros(template.shape[0], dtype=np.bool_)) for c in cameras
    }
    return frames, valid


def _object_ref(row: ManifestRow) -> ObjectRef:
    return ObjectRef(row.uri, row.sha256, row.size_bytes, row.episode_id)
