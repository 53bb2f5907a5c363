"""Per-dimension statistics match numpy on the source data, in the sample's state order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from episodes.episode import ACTIONS, STATE_KINDS, EpisodeData
from episodes.reader import EpisodeReader
from episodes.stats import ACTION_FIELD, STATE_FIELD, column_stats, episode_stats


def test_stats_match_the_source(container: Path, episode: EpisodeData) -> None:
    with EpisodeReader(container) as reader:
        stats = episode_stats(reader)
    state = [s for s in stats if s.field == STATE_FIELD]
    action = [s for s in stats if s.field == ACTION_FIELD]
    assert [s.dim for s in state] == list(range(13)) and [s.dim for s in action] == list(range(7))
    columns = [
        episode.vector(k).values[:, j]
        for k in STATE_KINDS
        for j in range(episode.vector(k).values.shape[1])
    ]
    for row, column in zip(state, columns, strict=True):
        col = column.astype(np.float64)
        assert row.count == len(col)
        assert row.sum == np.sum(col) and row.sum_sq == np.sum(col * col)
        assert row.min == col.min() and row.max == col.max()
    actions = episode.vector(ACTIONS).values.astype(np.float64)
    assert [a.count for a in action] == [len(actions)] * 7
    np.testing.assert_allclose([a.mean for a in action], actions.mean(0), rtol=1e-9)


def test_non_finite_values_are_left_out() -> None:
    values = np.array([[1.0, np.nan], [3.0, np.inf], [5.0, 2.0]], dtype=np.float32)
    first, second = column_stats(STATE_FIELD, values, first_dim=4)
    assert (first.dim, first.count, first.sum, first.sum_sq, first.min, first.max) == (
        4,
        3,
        9.0,
        35.0,
        1.0,
        5.0,
    )
    assert (second.count, second.sum, second.min, second.max) == (1, 2.0, 2.0, 2.0)
