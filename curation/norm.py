"""Normalization statistics of a curation, reproducible to the bit.

A manifest records the sum and sum of squares of every state and action dimension over its
episodes (from the per-episode statistics rows). A floating-point sum depends on the order of
its terms, and a parallel engine adds in whatever order its threads finish, so a rebuild could
change the last bits, and with them the manifest's bytes and ID. Here the warehouse returns the
per-episode terms and they are added exactly, then rounded once (the correctly rounded sum,
as :func:`math.fsum` gives): the result depends only on the set of terms, not on their order,
the engine's threads or the backend.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Floats = npt.NDArray[np.float64]

#: Integer bits of a double's mantissa (``frexp`` gives ``m * 2**e`` with ``0.5 <= |m| < 1``).
_MANTISSA_BITS = 53
#: Mantissas are split in two halves of at most this many bits, so that sums of up to
#: ``_CHUNK`` halves stay below 2**53 and are exact even in float64 accumulators.
_HALF_BITS = 27
_CHUNK = 1 << 24


def exact_sum(values: Floats | Iterable[float]) -> float:
    """The correctly rounded sum of ``values`` (as :func:`math.fsum`), whatever their order.

    Each finite value is ``mantissa * 2**(exponent - 53)`` with an integer mantissa; the
    mantissas are added exactly per exponent (vectorized), the per-exponent totals in Python
    integers, and the exact total is rounded to a float once. Infinities and NaNs follow
    IEEE rules (any NaN, or both infinities, give NaN); a finite total too large for a float
    gives an infinity of its sign; a zero total is ``0.0`` (as ``fsum`` gives it).
    """
    array = np.ascontiguousarray(np.asarray(values, dtype=np.float64).ravel())
    if array.size == 0:
        return 0.0
    if not np.isfinite(array).all():
        return _special_sum(array)
    chunks = range(0, array.size, _CHUNK)
    total = sum(_exact_parts(array[start : start + _CHUNK]) for start in chunks)
    return _to_float(total)


def _special_sum(array: Floats) -> float:
    """The IEEE sum of values some of which are not finite, whatever their order: NaN when
    any is NaN or both infinities occur, else the infinity that occurs (finite terms cannot
    change it; a plain sum could overflow them into the other infinity first)."""
    if np.isnan(array).any():
        return math.nan
    positive, negative = bool((array == np.inf).any()), bool((array == -np.inf).any())
    if positive and negative:
        return math.nan
    return math.inf if positive else -math.inf


# The exact total is kept as an integer number of units of 2**_LOW_EXPONENT: below the
# smallest subnormal's exponent, so every double is an integer count of such units.
_LOW_EXPONENT = -1074 - _MANTISSA_BITS
#: The smallest exponent ``frexp`` gives (that of the smallest subnormal, 2**-1074).
_MIN_EXPONENT = -1073


def _exact_parts(chunk: Floats) -> int:
    """The exact sum of ``chunk`` (finite, at most ``_CHUNK`` values) in units of
    ``2**_LOW_EXPONENT``."""
    mantissa, exponent = np.frexp(chunk)
    integer = np.ldexp(mantissa, _MANTISSA_BITS).astype(np.int64)  # exact: |m| * 2**53 < 2**53
    high = integer >> _HALF_BITS  # integer == high * 2**_HALF_BITS + low, 0 <= low < 2**27
    low = integer & ((1 << _HALF_BITS) - 1)
    # One bin per exponent (-1073 to 1024); sums of fewer than 2**24 integers below 2**27 in
    # magnitude are exact in float64.
    bins = exponent - _MIN_EXPONENT
    highs = np.bincount(bins, weights=high)
    lows = np.bincount(bins, weights=low)
    total = 0
    for index in np.flatnonzero((highs != 0) | (lows != 0)).tolist():
        units = (int(highs[index]) << _HALF_BITS) + int(lows[index])
        total += units << (index + _MIN_EXPONENT - _MANTISSA_BITS - _LOW_EXPONENT)
    return total


def _to_float(total: int) -> float:
    """``total * 2**_LOW_EXPONENT``, correctly rounded (Python's int division rounds so)."""
    try:
        return total / (1 << -_LOW_EXPONENT)
    except OverflowError:
        return float("inf") if total > 0 else float("-inf")


def norm_stats(rows: pa.Table) -> dict[str, Any]:
    """The manifest's ``norm_stats`` from the statistics query's rows (one per field and
    dimension, ordered: ``field``, ``dim``, ``count``, ``min``, ``max``, and the lists of
    per-episode terms ``sums`` and ``sums_sq``): per field, the step count (the largest of its
    dimensions') and per-dimension sum, sum of squares, minimum and maximum. NULL terms are
    skipped, as SQL's SUM skips them."""
    stats: dict[str, Any] = {}
    sums = rows.column("sums").combine_chunks()
    sums_sq = rows.column("sums_sq").combine_chunks()
    for index, row in enumerate(rows.select(["field", "count", "min", "max"]).to_pylist()):
        entry = stats.setdefault(
            row["field"], {"count": 0, "sum": [], "sum_sq": [], "min": [], "max": []}
        )
        entry["count"] = max(entry["count"], int(row["count"]))
        entry["sum"].append(exact_sum(_terms(sums, index)))
        entry["sum_sq"].append(exact_sum(_terms(sums_sq, index)))
        entry["min"].append(float(row["min"]))
        entry["max"].append(float(row["max"]))
    return stats


def _terms(lists: pa.Array, index: int) -> Floats:
    values = pc.drop_null(lists[index].values)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
