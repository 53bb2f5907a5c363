"""First-fit decreasing packing of a run's recordings into batches (pure functions)."""

from __future__ import annotations

import random

import pytest

from pipeline.packing import Item, costs, first_fit_decreasing, in_order, makespan, pack


def skewed(n: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [rng.lognormvariate(0.0, 1.0) for _ in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_ffd_places_every_item_once_and_respects_capacity(seed: int) -> None:
    weights = skewed(60, seed)
    capacity = sum(weights) / 8
    bins = first_fit_decreasing(weights, capacity)
    placed = sorted(i for b in bins for i in b)
    assert placed == list(range(len(weights)))
    for b in bins:
        load = sum(weights[i] for i in b)
        assert load <= capacity + 1e-9 or len(b) == 1


def test_an_item_over_capacity_gets_a_bin_of_its_own() -> None:
    bins = first_fit_decreasing([5.0, 1.0, 1.0], capacity=2.0)
    assert bins == [[0], [1, 2]]


def test_ffd_is_deterministic_and_keeps_input_order_on_ties() -> None:
    weights = [1.0, 1.0, 2.0, 1.0, 2.0]
    assert first_fit_decreasing(weights, 3.0) == first_fit_decreasing(list(weights), 3.0)
    assert first_fit_decreasing(weights, 3.0) == [[2, 0], [4, 1], [3]]


def test_ffd_refuses_bad_capacity_and_weights() -> None:
    with pytest.raises(ValueError, match="capacity"):
        first_fit_decreasing([1.0], 0.0)
    with pytest.raises(ValueError, match="weight"):
        first_fit_decreasing([1.0, -1.0], 2.0)
    with pytest.raises(ValueError, match="weight"):
        first_fit_decreasing([float("nan")], 2.0)


def test_costs_weigh_bytes_and_duration_alike() -> None:
    items = [Item("a", 100, 10.0), Item("b", 300, 10.0), Item("c", 200, 40.0)]
    assert costs(items) == pytest.approx([0.5 + 0.5, 1.5 + 0.5, 1.0 + 2.0])
    assert costs([Item("a", 0), Item("b", 0)]) == [1.0, 1.0]
    assert costs([Item("a", 10), Item("b", 30)]) == [0.5, 1.5]


def test_pack_balances_a_skewed_run_better_than_arrival_order() -> None:
    weights = sorted(skewed(64, 7), reverse=True)  # the big recordings arrive together
    items = [Item(str(i), int(w * 1e6)) for i, w in enumerate(weights)]
    packed = pack(items, 4)
    assert sorted(i.key for b in packed for i in b) == sorted(i.key for i in items)
    size = {i.key: i.size_bytes / 1e6 for i in items}
    assert len(packed) <= len(in_order(items, 4)) == 16
    ffd = makespan([[size[i.key] for i in b] for b in packed], workers=4)
    naive = makespan([[size[i.key] for i in b] for b in in_order(items, 4)], workers=4)
    assert ffd < naive
    assert pack(items, 1) == [[i] for i in sorted(items, key=lambda i: -i.size_bytes)]
    assert pack([], 4) == []
    with pytest.raises(ValueError, match="batch_items"):
        pack(items, 0)


def test_makespan_takes_batches_in_order_on_the_first_free_worker() -> None:
    assert makespan([[3.0], [1.0], [1.0], [1.0]], workers=2) == 3.0
    assert makespan([[1.0], [1.0], [3.0]], workers=2) == 4.0
    with pytest.raises(ValueError, match="workers"):
        makespan([[1.0]], workers=0)


def test_pack_makes_the_batches_arrival_order_would_and_evens_them() -> None:
    items = [Item(str(i), int(w * 1e6)) for i, w in enumerate(skewed(40, 3)) if w < 3]
    packed = pack(items, 4)
    assert len(packed) == len(in_order(items, 4))
    loads = [sum(i.size_bytes for i in b) for b in packed]
    naive = [sum(i.size_bytes for i in b) for b in in_order(items, 4)]
    assert max(loads) - min(loads) < (max(naive) - min(naive)) / 2


def test_a_fixed_cost_weighs_every_item_alike() -> None:
    items = [Item("a", 100), Item("b", 300)]
    assert costs(items, fixed=1.0) == [1.5, 2.5]
    with pytest.raises(ValueError, match="fixed"):
        costs(items, fixed=-1.0)
    # Many small recordings no longer pile into one batch when each costs something alone.
    many = [Item("big", 1000)] + [Item(f"s{i}", 10) for i in range(7)]
    assert [len(b) for b in pack(many, 4)] == [1, 7]
    assert [len(b) for b in pack(many, 4, fixed=3.0)] == [3, 5]
