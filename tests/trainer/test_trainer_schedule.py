"""Checkpoint interval (Young/Daly) and goodput accounting."""

from __future__ import annotations

import gc
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.config import CheckpointSection
from trainer.goodput import GcPauses, GoodputMeter, Ledger, Phase, mfu, resume_ledger
from trainer.schedule import CheckpointSchedule, young_daly_s


def test_young_daly_formula() -> None:
    assert young_daly_s(2.0, 3600.0) == pytest.approx(math.sqrt(2 * 2 * 3600))
    assert young_daly_s(0.0, 3600.0) == 0.0


def test_mtbf_is_per_node_divided_by_nodes() -> None:
    config = CheckpointSection(mtbf_node_s=8000.0)
    assert CheckpointSchedule(config, num_nodes=4, start_step=0).mtbf_s == 2000.0


def test_first_save_after_interval_steps_from_the_start_step() -> None:
    schedule = CheckpointSchedule(CheckpointSection(interval_steps=7), 1, start_step=20)
    assert not schedule.due(26)
    assert schedule.due(27)


def test_interval_in_steps_follows_measured_cost_and_step_time() -> None:
    config = CheckpointSection(mtbf_node_s=200.0, max_interval_steps=10_000)
    schedule = CheckpointSchedule(config, num_nodes=2, start_step=0)
    plan = schedule.plan_after_save(step=10, cost_s=1.0, step_time_s=0.1, write_s=None)
    # M = 100 s, C = 1 s: sqrt(2 * 1 * 100) = 14.14 s = 141 steps of 0.1 s.
    assert plan.interval_s == pytest.approx(math.sqrt(200.0))
    assert plan.next_step == 10 + 141


def test_interval_is_bounded_and_never_shorter_than_a_write() -> None:
    config = CheckpointSection(mtbf_node_s=1.0, min_interval_steps=5, max_interval_steps=50)
    schedule = CheckpointSchedule(config, num_nodes=1, start_step=0)
    assert schedule.plan_after_save(0, 0.001, 1.0, None).next_step == 5
    assert schedule.plan_after_save(0, 0.001, 0.1, write_s=1.5).next_step == 30  # 2 x write
    assert schedule.plan_after_save(0, 1e6, 0.1, None).next_step == 50


def test_fixed_interval_ignores_measurements() -> None:
    schedule = CheckpointSchedule(CheckpointSection(interval="steps", interval_steps=4), 1, 0)
    assert schedule.plan_after_save(8, 100.0, 0.01, 5.0).next_step == 12


@given(
    cost=st.floats(0.001, 100.0),
    more=st.floats(1.0, 10.0),
    step_s=st.floats(0.001, 10.0),
)
def test_interval_grows_with_checkpoint_cost(cost: float, more: float, step_s: float) -> None:
    config = CheckpointSection(max_interval_steps=10**9)
    cheap = CheckpointSchedule(config, 1, 0).plan_after_save(0, cost, step_s, None)
    dear = CheckpointSchedule(config, 1, 0).plan_after_save(0, cost * more, step_s, None)
    assert dear.next_step >= cheap.next_step


def test_ledger_snapshot_round_trip() -> None:
    ledger = Ledger(run_started_wall=100.0, steps=3, samples=12, losses=[1.0, 0.5])
    ledger.add(Phase.COMPUTE, 2.0)
    ledger.add(Phase.DATA_WAIT, 0.5)
    again = Ledger.from_snapshot(ledger.snapshot())
    assert again.seconds == ledger.seconds
    assert (again.steps, again.samples, again.losses) == (3, 12, [1.0, 0.5])
    assert again.goodput_fraction == pytest.approx(2.0 / 2.5)


def test_recovery_charges_work_since_the_checkpoint_and_the_restart() -> None:
    base = Ledger(run_started_wall=1000.0)
    base.add(Phase.INIT, 5.0)
    base.add(Phase.COMPUTE, 45.0)
    snapshot = base.snapshot()
    snapshot["snapshot_wall"] = 1050.0
    ledger, recovery = resume_ledger(snapshot, run_started_wall=1000.0, failure_wall=1060.0)
    assert recovery.lost_work_s == pytest.approx(10.0)
    assert ledger.seconds[Phase.RECOVERY] == pytest.approx(10.0)
    meter = GoodputMeter(ledger, attempt_started_wall=time.time(), recovery=recovery)
    meter.start_training()
    with meter.phase(Phase.COMPUTE):
        pass
    meter.end_step(samples=4, loss=1.0, step_s=0.1)
    assert meter.recovery is not None and meter.recovery.recovery_s is not None
    # Everything from the run's start to the first step after the restart is accounted for.
    total = ledger.total_s
    assert total == pytest.approx(time.time() - 1000.0, abs=0.5)
    assert ledger.seconds[Phase.COMPUTE] == pytest.approx(45.0)


def test_failure_before_any_checkpoint_loses_everything() -> None:
    ledger, recovery = resume_ledger(None, run_started_wall=10.0, failure_wall=25.0)
    assert recovery.lost_work_s == 15.0
    assert ledger.seconds[Phase.RECOVERY] == 15.0


def test_mfu() -> None:
    assert mfu(1e9, 0.5, 1e10) == pytest.approx(0.2)
    assert mfu(1e9, 0.0, 1e10) == 0.0


def test_gc_pauses_add_up_and_count_full_collections() -> None:
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    try:
        gc.collect(0)
        gc.collect()  # the oldest generation
    finally:
        gc.callbacks.remove(pauses)
    assert pauses.count == 2 and pauses.full == 1
    assert pauses.seconds >= pauses.longest_s > 0
