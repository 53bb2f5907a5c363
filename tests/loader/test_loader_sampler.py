"""Sampler invariants (property tests): exact cover, equal shares, node affinity, resume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.errors import SamplerStateError
from loader.sampler import EpochSampler


def layouts():
    return st.tuples(st.integers(1, 3), st.integers(1, 3))  # (nodes, ranks per node)


def row_counts():
    return st.lists(st.integers(0, 12), min_size=0, max_size=25)


def offsets_of(counts: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def samplers(counts, nodes, per_node, seed=0, epoch=0):
    offsets = offsets_of(counts)
    world = nodes * per_node
    return [
        EpochSampler(
            int(offsets[-1]),
            offsets,
            rank=r,
            world_size=world,
            ranks_per_node=per_node,
            seed=seed,
            epoch=epoch,
        )
        for r in range(world)
    ]


@settings(max_examples=150, deadline=None)
@given(counts=row_counts(), layout=layouts(), seed=st.integers(0, 2**31))
def test_epoch_covers_every_sample_with_equal_shares(counts, layout, seed) -> None:
    nodes, per_node = layout
    ranks = samplers(counts, nodes, per_node, seed)
    total, world = sum(counts), nodes * per_node
    sequences = [s.indices() for s in ranks]
    assert len({len(q) for q in sequences}) == 1  # equal counts per rank
    everything = np.concatenate(sequences)
    assert set(everything.tolist()) == set(range(total))
    assert 0 <= len(everything) - total <= world - 1  # padding repeats at most world - 1
    # Node affinity: node shares hold disjoint real samples; few rows straddle two nodes.
    offsets = offsets_of(counts)
    node_rows = []
    for node in range(nodes):
        share = np.concatenate(sequences[node * per_node : (node + 1) * per_node])
        node_rows.append(set((np.searchsorted(offsets, share, side="right") - 1).tolist()))
        assert set(ranks[node * per_node].node_rows().tolist()) == node_rows[-1]
    shared = sum(len(a & b) for i, a in enumerate(node_rows) for b in node_rows[i + 1 :])
    assert shared <= (nodes - 1) + (world - 1)  # split rows, plus padding drawn from them


@settings(max_examples=60, deadline=None)
@given(counts=row_counts(), layout=layouts(), seed=st.integers(0, 99), data=st.data())
def test_same_layout_resume_is_exact(counts, layout, seed, data) -> None:
    nodes, per_node = layout
    ranks = samplers(counts, nodes, per_node, seed, epoch=3)
    full = [s.indices().copy() for s in ranks]
    step = data.draw(st.integers(0, len(full[0])))
    for s in ranks:
        s.mark_consumed(step)
    state = ranks[0].state_dict()
    for r, fresh in enumerate(samplers(counts, nodes, per_node, seed)):
        fresh.load_state_dict(state)
        assert fresh.epoch == 3
        np.testing.assert_array_equal(fresh.indices(), full[r][step:])
        assert len(fresh) == len(full[r]) - step


def consume(ranks, steps: int) -> list[int]:
    taken = []
    for s in ranks:
        taken.extend(s.indices()[:steps].tolist())
        s.mark_consumed(steps)
    return taken


@settings(max_examples=120, deadline=None)
@given(
    counts=row_counts(),
    first=layouts(),
    second=layouts(),
    third=layouts(),
    seed=st.integers(0, 99),
    data=st.data(),
)
def test_elastic_resume_neither_repeats_nor_skips(counts, first, second, third, seed, data):
    total = sum(counts)
    seen: list[int] = []
    padding_allowed = 0
    state = None
    for nodes, per_node in (first, second, third):
        ranks = samplers(counts, nodes, per_node, seed)
        if state is not None:
            for s in ranks:
                s.load_state_dict(state)
        steps = data.draw(st.integers(0, len(ranks[0])))
        seen += consume(ranks, steps)
        padding_allowed += nodes * per_node - 1
        state = ranks[0].state_dict()
    seen += consume(ranks, len(ranks[0]))  # the last layout finishes the epoch
    assert set(seen) == set(range(total))
    assert len(seen) - total <= padding_allowed


def test_permutation_depends_on_seed_and_epoch() -> None:
    a = EpochSampler(1000, seed=1).indices()
    assert sorted(a.tolist()) == list(range(1000))
    np.testing.assert_array_equal(a, EpochSampler(1000, seed=1).indices())
    assert not np.array_equal(a, EpochSampler(1000, seed=2).indices())
    assert not np.array_equal(a, EpochSampler(1000, seed=1, epoch=1).indices())
    moved = EpochSampler(1000, seed=1)
    moved.set_epoch(1)
    np.testing.assert_array_equal(moved.indices(), EpochSampler(1000, seed=1, epoch=1).indices())


def test_bad_states_and_layouts() -> None:
    sampler = EpochSampler(10, seed=1)
    with pytest.raises(SamplerStateError):
        sampler.load_state_dict({**sampler.state_dict(), "seed": 2})
    with pytest.raises(SamplerStateError):
        sampler.mark_consumed(11)
    with pytest.raises(SamplerStateError):
        EpochSampler(10, rank=4, world_size=4)
    with pytest.raises(SamplerStateError):
        EpochSampler(10, world_size=4, ranks_per_node=3)


@pytest.mark.slow
def test_large_epoch_is_planned_in_numpy() -> None:
    offsets = np.arange(0, 10_000_001, 50, dtype=np.int64)  # 200k rows of 50 samples
    sampler = EpochSampler(10_000_000, offsets, rank=5, world_size=16, ranks_per_node=8, seed=3)
    assert len(sampler) == 625_000
    assert sampler.indices().dtype == np.int64
