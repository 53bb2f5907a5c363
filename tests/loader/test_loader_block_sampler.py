"""The block order of EpochSampler (``block > 1``): exact cover, blocks of consecutive
anchors of one row, deterministic, resumable on the same and on another layout."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.errors import SamplerStateError
from loader.sampler import EpochSampler


def offsets_of(counts: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def samplers(counts, nodes, per_node, block, seed=0, epoch=0):
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
            block=block,
        )
        for r in range(world)
    ]


def runs(sequence: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    """Maximal stretches of consecutive sample numbers of one row."""
    rows = np.searchsorted(offsets, sequence, side="right") - 1
    out: list[list[int]] = []
    for k, sample in enumerate(sequence.tolist()):
        if k and sample == out[-1][-1] + 1 and rows[k] == rows[k - 1]:
            out[-1].append(sample)
        else:
            out.append([sample])
    return out


layouts = st.tuples(st.integers(1, 3), st.integers(1, 3))
row_counts = st.lists(st.integers(0, 30), min_size=0, max_size=20)


@settings(max_examples=80, deadline=None)
@given(counts=row_counts, layout=layouts, block=st.integers(2, 9), seed=st.integers(0, 2**31))
def test_block_order_covers_every_sample_in_blocks(counts, layout, block, seed) -> None:
    nodes, per_node = layout
    ranks = samplers(counts, nodes, per_node, block, seed)
    total, world = sum(counts), nodes * per_node
    sequences = [s.indices() for s in ranks]
    assert len({len(q) for q in sequences}) == 1
    everything = np.concatenate(sequences)
    assert set(everything.tolist()) == set(range(total))
    assert 0 <= len(everything) - total <= world - 1
    offsets = offsets_of(counts)
    for sequence in sequences:
        real = sequence[: max(0, len(sequence) - (world - 1))]  # padding may sit at the end
        blocks_needed = sum(-(-c // block) for c in counts)
        # every stretch of a row is whole blocks: at most `blocks_needed` of them in all
        assert len(runs(real, offsets)) <= blocks_needed + world


def test_block_order_is_deterministic_and_shuffles_blocks() -> None:
    counts = [40, 25, 33, 12]
    offsets = offsets_of(counts)
    first = EpochSampler(110, offsets, seed=3, block=8).indices()
    np.testing.assert_array_equal(first, EpochSampler(110, offsets, seed=3, block=8).indices())
    assert not np.array_equal(first, EpochSampler(110, offsets, seed=4, block=8).indices())
    assert not np.array_equal(first, np.sort(first))
    stretches = runs(first, offsets)
    assert len(stretches) <= sum(-(-c // 8) for c in counts)  # blocks never split
    assert len(stretches) > len(counts)  # ... but the rows are cut into shuffled blocks
    for stretch in stretches:  # each stretch starts at a block boundary of its row
        row = int(np.searchsorted(offsets, stretch[0], side="right") - 1)
        assert (stretch[0] - offsets[row]) % 8 == 0
    assert sorted(first.tolist()) == list(range(110))
    # block=1 is the plain shuffle, unchanged
    np.testing.assert_array_equal(
        EpochSampler(110, offsets, seed=3, block=1).indices(),
        EpochSampler(110, offsets, seed=3).indices(),
    )
    assert "block" not in EpochSampler(110, offsets).state_dict()


@settings(max_examples=40, deadline=None)
@given(counts=row_counts, layout=layouts, seed=st.integers(0, 99), data=st.data())
def test_block_order_resumes_exactly(counts, layout, seed, data) -> None:
    nodes, per_node = layout
    ranks = samplers(counts, nodes, per_node, 6, seed, epoch=2)
    full = [s.indices().copy() for s in ranks]
    step = data.draw(st.integers(0, len(full[0])))
    for s in ranks:
        s.mark_consumed(step)
    state = ranks[0].state_dict()
    assert state["block"] == 6
    for r, fresh in enumerate(samplers(counts, nodes, per_node, 6, seed)):
        fresh.load_state_dict(state)
        np.testing.assert_array_equal(fresh.indices(), full[r][step:])


@settings(max_examples=40, deadline=None)
@given(counts=row_counts, first=layouts, second=layouts, seed=st.integers(0, 99), data=st.data())
def test_block_order_elastic_resume_neither_repeats_nor_skips(counts, first, second, seed, data):
    seen: list[int] = []
    state = None
    for nodes, per_node in (first, second):
        ranks = samplers(counts, nodes, per_node, 5, seed)
        if state is not None:
            for s in ranks:
                s.load_state_dict(state)
        steps = data.draw(st.integers(0, len(ranks[0])))
        for s in ranks:
            seen.extend(s.indices()[:steps].tolist())
            s.mark_consumed(steps)
        state = ranks[0].state_dict()
    for s in ranks:
        seen.extend(s.indices().tolist())
    assert set(seen) == set(range(sum(counts)))
    assert len(seen) - sum(counts) <= sum(n * p - 1 for n, p in (first, second))


def test_block_must_match_on_resume_and_be_positive() -> None:
    sampler = EpochSampler(50, block=4)
    with pytest.raises(SamplerStateError):
        EpochSampler(50, block=5).load_state_dict(sampler.state_dict())
    with pytest.raises(SamplerStateError):
        EpochSampler(50).load_state_dict(sampler.state_dict())
    for bad in (0, -1, 2.5, True):
        with pytest.raises(SamplerStateError):
            EpochSampler(50, block=bad)  # type: ignore[arg-type]
