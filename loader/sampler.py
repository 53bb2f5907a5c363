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

Block order (``block > 1``): in step 2 the node's share is cut into *blocks* of at most
``block`` consecutive samples of one row (consecutive anchors of one episode slice; a new
block starts at every row start), the blocks are permuted (seeded as above) and the samples
of each block stay in anchor order; the padded share is then dealt so that local rank ``l``
takes the contiguous stretch ``l * q`` to ``(l + 1) * q``, i.e. whole blocks. A reader then
decodes a stretch of video once and serves the block's samples from it. Randomness bound:
the order of blocks is a uniform permutation, but inside a block nothing is shuffled, so any
``k`` consecutive samples of a rank come from at most ``ceil(k / block) + 1`` blocks (a batch
of ``B`` samples holds at least ``ceil(B / block)`` distinct stretches, each at most
``block * anchor_stride`` control steps long). ``block = 1`` is the plain shuffle above, with
the same order as before blocks existed.

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
    pool: Int64Array,
    row_offsets: Int64Array | None,
    layout: Layout,
    seed_key: list[int],
    block: int = 1,
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
        node_rng = np.random.default_rng([*seed_key, node + 1])
        if block > 1:
            share = _shuffle_blocks(share, row_offsets, block, node_rng)
        else:
            share = share[node_rng.permutation(len(share))]
        source = share if len(share) else pool
        padding = np.resize(source, per_node * q - len(share)) if len(source) else source
        padded = np.concatenate([share, padding]).astype(np.int64, copy=False)
        if block > 1:  # local rank l takes the stretch [l * q, (l + 1) * q): whole blocks
            padded = padded.reshape(per_node, q).T.ravel()
        shares.append(padded)
    return shares


def _shuffle_blocks(
    share: Int64Array, row_offsets: Int64Array | None, block: int, rng: np.random.Generator
) -> Int64Array:
    """``share`` (grouped by row, anchor order inside a row) in permuted blocks of at most
    ``block`` consecutive samples of one row, each block kept in anchor order."""
    if len(share) == 0:
        return share
    if row_offsets is None:  # no row structure: blocks of consecutive sample numbers
        share = np.sort(share)
        rows = np.zeros(len(share), dtype=np.int64)
    else:
        rows = np.searchsorted(row_offsets, share, side="right") - 1
    position = np.arange(len(share), dtype=np.int64)
    row_start = np.ones(len(share), dtype=bool)
    row_start[1:] = rows[1:] != rows[:-1]
    first = np.maximum.accumulate(np.where(row_start, position, 0))
    starts = row_start | ((position - first) % block == 0)
    block_of = np.cumsum(starts) - 1
    rank = np.empty(int(block_of[-1]) + 1, dtype=np.int64)
    rank[rng.permutation(len(rank))] = np.arange(len(rank))
    return share[np.argsort(rank[block_of], kind="stable")]


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
    :param block: samples per block of the block order (see the module docstring); 1 is
        the plain shuffle. The same on every rank, and kept in the state.
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
        block: int = 1,
    ) -> None:
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise SamplerStateError(f"block must be a positive integer, got {block!r}")
        self.block = block
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
            shares = plan_segment(pool, self._offsets, layout, self._seed_key(index), self.block)
            taken = np.concatenate([s[: consumed * layout.ranks_per_node] for s in shares])
            pool = np.setdiff1d(pool, taken, assume_unique=False)
        return pool

    def _seed_key(self, segment: int) -> list[int]:
        return [self.seed, self.epoch, segment]

    def _node_share(self) -> Int64Array:
        segment = len(self._segments) - 1
        shares = plan_segment(
            self._pool(), self._offsets, self.layout, self._seed_key(segment), self.block
        )
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
        """Where the epoch stands: seed, epoch, samples, block (when not 1), and each
        segment's layout and count."""
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "num_samples": self.num_samples,
            "segments": [[s.num_nodes, s.ranks_per_node, c] for s, c in self._segments],
        }
        if self.block != 1:
            state["block"] = self.block
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` of any rank (ranks consume in lockstep).

        With the same layout the segment continues; with another one the samples not yet
        consumed are planned over this sampler's layout, so none is repeated or skipped.

        :raises SamplerStateError: the state is of another version, seed, manifest size or
            block.
        """
        expected = (STATE_VERSION, self.seed, self.num_samples, self.block)
        found = (
            state.get("version"),
            state.get("seed"),
            state.get("num_samples"),
            state.get("block", 1),
        )
        if found != expected:
            raise SamplerStateError(f"sampler state {found} does not fit {expected}")
        segments = [(Layout(int(n), int(r)), int(c)) for n, r, c in state["segments"]]
        self.set_epoch(int(state["epoch"]))
        if segments[-1][0] != self.layout:
            segments.append((self.layout, 0))
        self._segments = segments
