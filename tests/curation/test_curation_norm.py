"""Normalization statistics: the exact sum is math.fsum's, in any order; the statistics of a
manifest come from the per-episode terms the warehouse returns."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from curation.norm import exact_sum, norm_stats

finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(finite, max_size=200), st.randoms(use_true_random=False))
def test_exact_sum_is_fsum_in_any_order(values: list[float], rng: object) -> None:
    try:
        expected = math.fsum(values)
    except OverflowError:  # fsum's intermediate overflow: the exact total, rounded
        total = sum(Fraction(v) for v in values)
        try:
            expected = float(total)
        except OverflowError:
            expected = math.inf if total > 0 else -math.inf
    shuffled = list(values)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert exact_sum(values) == expected
    assert exact_sum(np.array(shuffled, dtype=np.float64)) == expected


def test_exact_sum_of_cancelling_and_tiny_terms() -> None:
    values = [1e308, 1.0, -1e308, 5e-324, 5e-324, 0.1, 0.2, -0.3]
    assert exact_sum(values) == math.fsum(values)
    assert exact_sum([0.1] * 10) == 1.0  # a plain sum gives 0.9999999999999999
    assert exact_sum([]) == 0.0
    assert math.copysign(1, exact_sum([-0.0, -0.0])) == 1  # as fsum
    assert exact_sum([1e308, 1e308]) == math.inf
    assert math.isnan(exact_sum([math.inf, -math.inf]))
    assert exact_sum([math.inf, 1.0]) == math.inf
    assert math.isnan(exact_sum([math.nan, 1.0]))


def test_infinities_win_over_finite_overflow_in_any_order() -> None:
    values = np.array([1e308, 1e308, -math.inf])
    assert exact_sum(values) == -math.inf  # a plain sum in this order gives NaN
    assert exact_sum(values[::-1]) == -math.inf
    assert exact_sum([-1e308, -1e308, math.inf, 5.0]) == math.inf


def test_exact_sum_is_the_same_for_a_large_array_in_any_order() -> None:
    rng = np.random.default_rng(3)
    values = rng.standard_normal(300_000) * 10.0 ** rng.integers(-5, 8, size=300_000)
    total = exact_sum(values)
    assert total == math.fsum(values.tolist())
    assert exact_sum(rng.permutation(values)) == total
    assert exact_sum(values[::-1]) == total


def test_norm_stats_from_per_episode_terms() -> None:
    rows = pa.table(
        {
            "field": ["action", "state", "state"],
            "dim": [0, 0, 1],
            "count": [10, 12, 12],
            "min": [-1.0, 0.0, -2.0],
            "max": [1.0, 3.0, 2.0],
            "sums": [[0.1, 0.2], [0.1] * 10, [1.0, None, 2.0]],
            "sums_sq": [[0.01, 0.04], [1.0], [1.0, 4.0]],
        }
    )
    stats = norm_stats(rows)
    assert stats == {
        "action": {"count": 10, "sum": [0.30000000000000004], "sum_sq": [0.05], "min": [-1.0],
                   "max": [1.0]},
        "state": {"count": 12, "sum": [1.0, 3.0], "sum_sq": [1.0, 5.0], "min": [0.0, -2.0],
                  "max": [3.0, 2.0]},
    }  # fmt: skip
