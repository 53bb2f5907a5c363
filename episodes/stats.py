"""Per-dimension sufficient statistics of an episode's state and actions.

Rows use the field names ``state`` and ``action``. ``state`` dimensions follow the sample's
state order (joint positions, joint velocities, gripper), so a manifest's normalization
statistics are one SQL aggregate over ``episode_stats``. Each dimension is summed over the raw
samples of its topic (finite values only), so ``count`` may differ between topics of different
rates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .episode import ACTIONS
from .reader import EpisodeReader

STATE_FIELD = "state"
ACTION_FIELD = "action"


@dataclass(frozen=True)
class DimStats:
    """Sufficient statistics of one dimension of one field."""

    field: str
    dim: int
    count: int
    sum: float
    sum_sq: float
    min: float
    max: float

    @property
    def mean(self) -> float:
        """Mean of the dimension (NaN when empty)."""
        return self.sum / self.count if self.count else float("nan")


def column_stats(field: str, values: npt.NDArray[np.float32], first_dim: int = 0) -> list[DimStats]:
    """Statistics of each column of ``values`` (N, D), numbered from ``first_dim``."""
    out = []
    data = values.astype(np.float64)
    for col in range(data.shape[1]):
        column = data[:, col]
        column = column[np.isfinite(column)]
        if len(column) == 0:
            out.append(DimStats(field, first_dim + col, 0, 0.0, 0.0, 0.0, 0.0))
            continue
        out.append(
            DimStats(
                field=field,
                dim=first_dim + col,
                count=len(column),
                sum=float(column.sum()),
                sum_sq=float(np.square(column).sum()),
                min=float(column.min()),
                max=float(column.max()),
            )
        )
    return out


def episode_stats(reader: EpisodeReader) -> list[DimStats]:
    """``state`` and ``action`` statistics of the container behind ``reader``."""
    out: list[DimStats] = []
    dim = 0
    for topic in reader.info.state_topics():
        _, values = reader.read_vectors(topic.topic)
        out.extend(column_stats(STATE_FIELD, values, dim))
        dim += values.shape[1]
    actions = reader.info.vector(ACTIONS)
    if actions is not None:
        _, values = reader.read_vectors(actions.topic)
        out.extend(column_stats(ACTION_FIELD, values))
    return out
