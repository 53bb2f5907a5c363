"""SampleSpec: JSON round trip, validation, and anchor counting as a property."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodes.errors import SpecError
from episodes.spec import SampleSpec

specs = st.builds(
    SampleSpec,
    control_hz=st.sampled_from([10.0, 15.0, 30.0, 50.0, 100.0, 200.0, 7.5]),
    frames_per_camera=st.integers(1, 8),
    frame_stride=st.integers(1, 5),
    state_history=st.integers(1, 64),
    action_horizon=st.integers(1, 64),
    anchor_stride=st.integers(1, 100),
)
times = st.integers(-(2**60), 2**60)


@given(specs)
def test_dict_round_trip_through_json(spec: SampleSpec) -> None:
    assert SampleSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@given(specs, times, st.integers(-(10**10), 10**11))
def test_count_matches_anchors(spec: SampleSpec, start: int, length: int) -> None:
    anchors = spec.anchors(start, start + length)
    assert spec.count_samples(start, start + length) == len(anchors)
    assert all(start <= a < start + length for a in anchors.tolist())
    if len(anchors) > 1:
        assert set(np.diff(anchors).tolist()) == {spec.anchor_step_ns}


@given(specs, st.lists(st.tuples(times, st.integers(-(10**10), 10**11)), max_size=30))
def test_count_is_vectorized(spec: SampleSpec, slices: list[tuple[int, int]]) -> None:
    starts = np.array([s for s, _ in slices], dtype=np.int64)
    ends = np.array([s + n for s, n in slices], dtype=np.int64)
    counts = spec.count_samples(starts, ends)
    assert counts.dtype == np.int64 and counts.shape == starts.shape
    assert counts.tolist() == [
        spec.count_samples(int(s), int(e)) for s, e in zip(starts, ends, strict=True)
    ]


def test_defaults_fit_a_twenty_second_episode() -> None:
    spec = SampleSpec()
    assert spec.period_ns == 20_000_000
    assert 50 <= spec.count_samples(0, 20 * 10**9) <= 400


@pytest.mark.parametrize(
    "data",
    [
        {"control_hz": 0},
        {"control_hz": float("nan")},
        {"control_hz": "50"},
        {"frames_per_camera": 0},
        {"state_history": 2.5},
        {"action_horizon": True},
        {"anchor_stride": -1},
        {"bogus": 1},
        [1, 2],
    ],
)
def test_invalid_specs_are_refused(data: object) -> None:
    with pytest.raises(SpecError):
        SampleSpec.from_dict(data)
