"""Normalization statistics: per-dimension mean and standard deviation from sums."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import ManifestFormatError

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class FieldStats:
    """Sufficient statistics of one field (``state`` or ``action``) over a manifest's episodes.

    :param count: number of steps aggregated (steps at the control rate).
    :param sum: per-dimension sum of values.
    :param sum_sq: per-dimension sum of squared values.
    :param min: per-dimension minimum, or ``None`` if not recorded.
    :param max: per-dimension maximum, or ``None`` if not recorded.
    """

    count: int
    sum: Vector
    sum_sq: Vector
    min: Vector | None = None
    max: Vector | None = None

    @classmethod
    def from_dict(cls, name: str, data: Any) -> FieldStats:
        """Parse the JSON form stored under ``quarry.norm_stats[name]``.

        :raises ManifestFormatError: keys are missing or dimensions disagree.
        """
        if not isinstance(data, dict) or not {"count", "sum", "sum_sq"} <= data.keys():
            raise ManifestFormatError(f"norm_stats.{name} needs count, sum and sum_sq")
        total = np.asarray(data["sum"], dtype=np.float64)
        sum_sq = np.asarray(data["sum_sq"], dtype=np.float64)
        low = None if data.get("min") is None else np.asarray(data["min"], dtype=np.float64)
        high = None if data.get("max") is None else np.asarray(data["max"], dtype=np.float64)
        dims = {v.shape for v in (total, sum_sq, low, high) if v is not None}
        if len(dims) != 1 or total.ndim != 1:
            raise ManifestFormatError(f"norm_stats.{name} vectors disagree in shape: {dims}")
        count = int(data["count"])
        if count < 0:
            raise ManifestFormatError(f"norm_stats.{name}.count is negative")
        return cls(count=count, sum=total, sum_sq=sum_sq, min=low, max=high)

    @property
    def dim(self) -> int:
        """Number of dimensions."""
        return int(self.sum.shape[0])

    def mean(self) -> Vector:
        """Per-dimension mean (``sum / count``); zeros when ``count`` is 0."""
        if self.count == 0:
            return np.zeros(self.dim)
        return self.sum / self.count

    def std(self, eps: float = 1e-6) -> Vector:
        """Per-dimension population standard deviation, floored at ``eps``.

        Computed as ``sqrt(max(sum_sq / count - mean**2, 0))``; the floor keeps constant
        dimensions (e.g. an unused gripper) from dividing by zero.
        """
        if self.count == 0:
            return np.ones(self.dim)
        var = np.maximum(self.sum_sq / self.count - self.mean() ** 2, 0.0)
        return np.maximum(np.sqrt(var), eps)
