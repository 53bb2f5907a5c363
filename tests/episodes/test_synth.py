"""The synthetic fleet: deterministic, varied, and its actions follow what the data shows."""

from __future__ import annotations

import numpy as np
import pytest

from episodes._faults import _span
from episodes.episode import ACTIONS, JOINT_POSITIONS
from episodes.synth import FleetConfig, _kinematics, episode_id, synth_episode

from .conftest import SHORT


def test_deterministic_from_seed_and_index() -> None:
    a, b = synth_episode(1, 2, SHORT), synth_episode(1, 2, SHORT)
    assert a.episode_id == b.episode_id == episode_id(1, 2)
    for x, y in zip(a.cameras, b.cameras, strict=True):
        np.testing.assert_array_equal(x.frames, y.frames)
    for v, w in zip(a.vectors, b.vectors, strict=True):
        np.testing.assert_array_equal(v.values, w.values)
    assert synth_episode(1, 3, SHORT).episode_id != a.episode_id
    assert synth_episode(2, 2, SHORT).episode_id != a.episode_id


def test_fleet_varies_and_keeps_its_rates() -> None:
    episodes = [synth_episode(0, i, FleetConfig()) for i in range(12)]
    assert len({e.robot_id for e in episodes}) >= 3
    assert len({e.task_id for e in episodes}) >= 2
    assert len({e.site for e in episodes}) >= 2
    assert {e.success for e in episodes} == {True, False}
    for ep in episodes:
        assert 10 <= (ep.end_ns - ep.start_ns) / 1e9 <= 20
        assert 2 <= len(ep.cameras) <= 3
        assert all(15 <= c.fps <= 30 for c in ep.cameras)
        assert ep.vector(JOINT_POSITIONS).rate_hz >= 100
        assert ep.vector(ACTIONS).rate_hz == ep.control_hz
        ep.validate()


def test_faults_are_a_few_percent() -> None:
    tiny = FleetConfig(width=16, height=16, duration_s=(4.0, 4.0))
    drawn = [synth_episode(4, i, tiny).extra["faults"] for i in range(100)]
    assert 2 <= sum(bool(f) for f in drawn) <= 20


def test_actions_follow_the_visible_target() -> None:
    """The first action moves the effector toward the cube, found in the front camera image."""
    ep = synth_episode(3, 0, SHORT, faults=())
    front = ep.cameras[0].frames[0].astype(np.int16)
    cube = np.all(np.abs(front - np.array([230, 200, 40])) < 25, axis=2)
    ys, xs = np.nonzero(cube)
    target = np.array([xs.mean() / front.shape[1], ys.mean() / front.shape[0]])
    kin = _kinematics(ep.robot_model)
    q0 = ep.vector(JOINT_POSITIONS).values[0].astype(np.float64)
    effector = 0.5 + kin @ q0
    commanded = kin @ ep.vector(ACTIONS).values[0, :6]  # effector velocity the action asks for
    cosine = commanded @ (target - effector)
    cosine /= np.linalg.norm(commanded) * np.linalg.norm(target - effector)
    assert cosine > 0.9


@pytest.mark.parametrize("count", [8, 20, 45, 60, 300])
def test_fault_spans_fit_short_episodes(count: int) -> None:
    for seed in range(40):
        span = _span(np.random.default_rng(seed), count, 15.0)
        assert 0 <= span.start < span.stop <= count
