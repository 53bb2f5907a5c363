"""The epoch order: a deterministic, node-aware, resumable assignment of samples to ranks.

An epoch is planned from ``(seed, epoch)`` over the manifest's global sample numbers:

1. the manifest rows (episode slices) are permuted, and the samples, grouped by row in that
   order, are cut into ``num_nodes`` contiguous shares of equal size (+-1), so a node's
   samples come from its own rows (at most ``num_nodes - 1`` rows are split between two
   nodes) and a node warms only its share;
2. each node's share is shuffled (a permutation seeded by seed, epoch and node) and padded
   at its end with its own first samples to ``ranks_per_node * q`` entries, where
   ``q = ceil(num_samples / world_size)``; local rank ``l`` takes entries ``l, l + L, ...``.

So every rank gets exactly ``q`` samples, every sample is assigned once, and the padding at
the epoch's end repeats ``world_size * q - num_samples <= world_size - 1`` samples.

Consumption is counted by the trainer (:meth:`EpochSampler.mark_consumed`, called with the
samples of each finished step), not by what a DataLoader prefetched. Ranks consume in
lockstep, so the consumed set of node ``m`` is the first ``consumed * L`` entries of its
padded share. The state records, per *segment* of the epoch, the layout and the count
consumed; resuming with the same layout continues the segment, and resuming with another
layout starts a new segment that plans the samples not yet consumed over the new layout.
Memory while planning: about 24 bytes per sample of the epoch (numpy, no Python objects).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import SamplerStateError

Int64Array = npt.NDArray[np.int64]
STATE_VERSION = 1


@dataclass(frozen=True)
class Layout:
    """Ranks grouped into nodes: ``num_nodes`` nodes of ``ranks_per_node`` ranks each."""

    num_nodes: int
    ranks_per_node: int

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self.num_nodes * self.ranks_per_node


def plan_segment(
    pool: Int64Array, row_offsets: Int64Array | None, layout: Layout, seed_key: list[int]
) -> list[Int64Array]:
    """Every node's padded share of ``pool`` (sorted sample numbers), as described above."""
    rng = np.random.default_rng(seed_key)
    n, nodes, per_node = len(pool), layout.num_nodes, layout.ranks_per_node
    grouped = _group_by_permuted_rows(pool, row_offsets, rng)
    bounds = (np.arange(nodes + 1, dtype=np.int64) * n) // nodes
    q = -(-n // layout.world_size)
    shares = []
    for node in range(nodes):
        share = grouped[bounds[node] : bounds[node + 1]]
        share = share[np.random.default_rng([*seed_key, node + 1]).permutation(len(share))]
        source = share if len(share) else pool
        padding = np.resize(source, per_node * q - len(share)) if len(source) else source
        shares.append(np.concatenate([share, padding]).astype(np.int64, copy=False))
    return shares


def _group_by_permuted_rows(
    pool: Int64Array, row_offsets: Int64Array | None, rng: np.random.Generator
) -> Int64Array:
    if row_offsets is None:  # no row structure: every sample is its own row
        return pool[rng.permutation(len(pool))]
    rows = np.searchsorted(row_offsets, pool, side="right") - 1
    unique, inverse = np.unique(rows, return_inverse=True)
    position = np.empty(len(unique), dtype=np.int64)
    position[rng.permutation(len(unique))] = np.arange(len(unique))
    return pool[np.argsort(position[inverse], kind="stable")]


class EpochSampler:
    """This rank's sample numbers for an epoch; iterable, resumable, and elastic.

    :param num_samples: samples in the manifest (``Manifest.num_samples``).
    :param row_offsets: each row's first sample number plus ``num_samples`` at the end
        (``Manifest.index.row_offsets()``); ``None`` plans without row affinity.
    :param rank: this rank, ``0 <= rank < world_size``; node = ``rank // ranks_per_node``.
    :param world_size: number of ranks.
    :param ranks_per_node: ranks on each node (``LOCAL_WORLD_SIZE`` under torchrun).
    :param seed: seed of the permutation, the same on every rank.
    """

    def __init__(
        self,
        num_samples: int,
        row_offsets: npt.ArrayLike | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        ranks_per_node: int | None = None,
        seed: int = 0,
        epoch: int = 0,
    ) -> None:
        per_node = ranks_per_node or world_size
        if world_size < 1 or per_node < 1 or world_size % per_node or not 0 <= rank < world_size:
            raise SamplerStateError(
                f"bad layout: rank {rank}, world_size {world_size}, ranks_per_node {per_node}"
            )
        self.num_samples = int(num_samples)
        self._offsets = None if row_offsets is None else np.asarray(row_offsets, dtype=np.int64)
        self.layout = Layout(world_size // per_node, per_node)
        self.rank, self.seed = rank, seed
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its beginning."""
        self.epoch = epoch
        self._segments: list[tuple[Layout, int]] = [(self.layout, 0)]
        self._sequence: Int64Array | None = None

    @property
    def consumed(self) -> int:
        """Samples this rank consumed in the current segment of the epoch."""
        return self._segments[-1][1]

    def mark_consumed(self, count: int) -> None:
        """Record that this rank's training consumed ``count`` more samples (a step's batch)."""
        layout, consumed = self._segments[-1]
        if count < 0 or consumed + count > len(self._rank_sequence()):
            raise SamplerStateError(f"cannot consume {count} after {consumed} of {len(self)}")
        self._segments[-1] = (layout, consumed + count)

    def _pool(self) -> Int64Array:
        """Sample numbers not consumed before the current segment, sorted."""
        pool = np.arange(self.num_samples, dtype=np.int64)
        for index, (layout, consumed) in enumerate(self._segments[:-1]):
            shares = plan_segment(pool, self._offsets, layout, self._seed_key(index))
            taken = np.concatenate([s[: consumed * layout.ranks_per_node] for s in shares])
            pool = np.setdiff1d(pool, taken, assume_unique=False)
        return pool

    def _seed_key(self, segment: int) -> list[int]:
        return [self.seed, self.epoch, segment]

    def _node_share(self) -> Int64Array:
        segment = len(self._segments) - 1
        shares = plan_segment(self._pool(), self._offsets, self.layout, self._seed_key(segment))
        return shares[self.rank // self.layout.ranks_per_node]

    def _rank_sequence(self) -> Int64Array:
        if self._sequence is None:
            local = self.rank % self.layout.ranks_per_node
            self._sequence = self._node_share()[local :: self.layout.ranks_per_node].copy()
        return self._sequence

    def indices(self) -> Int64Array:
        """This rank's sample numbers not yet consumed in this epoch, in order."""
        return self._rank_sequence()[self.consumed :]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return len(self._rank_sequence()) - self.consumed

    def node_rows(self) -> Int64Array:
        """Manifest rows this rank's node still reads this epoch (what the node should warm)."""
        share = self._node_share()
        if self._offsets is None:
            return np.unique(share)
        return np.unique(np.searchsorted(self._offsets, share, side="right") - 1)

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch stands: seed, epoch, samples, and each segment's layout and count."""
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "num_samples": self.num_samples,
            "segments": [[s.num_nodes, s.ranks_per_node, c] for s, c in self._segments],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` of any rank (ranks consume in lockstep).

        With the same layout the segment continues; with another one the samples not yet
        consumed are planned over this sampler's layout, so none is repeated or skipped.

        :raises SamplerStateError: the state is of another version, seed or manifest size.
        """
        expected = (STATE_VERSION, self.seed, self.num_samples)
        found = (state.get("version"), state.get("seed"), state.get("num_samples"))
        if found != expected:
            raise SamplerStateError(f"sampler state {found} does not fit {expected}")
        segments = [(Layout(int(n), int(r)), int(c)) for n, r, c in state["segments"]]
        self.set_epoch(int(state["epoch"]))
        if segments[-1][0] != self.layout:
            segments.append((self.layout, 0))
        self._segments = segments
