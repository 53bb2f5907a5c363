"""When to checkpoint: a fixed step interval, or Young/Daly's optimum from measured costs.

Young/Daly: with checkpoint cost C (the time a save blocks training) and mean time between
failures M of the whole job, the interval that minimizes expected lost time is
``sqrt(2 x C x M)``. M is the per-node MTBF divided by the node count. C is measured from this
run's own saves; the interval is converted to steps with the measured step time. Every input is
agreed across ranks before it is used (see :meth:`CheckpointSchedule.plan_after_save`), so all
ranks checkpoint at the same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import CheckpointSection

WRITE_MULTIPLE = 2.0
"""The interval is at least this many times the last write: the async writer, which competes
with training for CPU and I/O, is busy at most half the time."""


@dataclass(frozen=True)
class IntervalPlan:
    """The next save, and why.

    :param next_step: the step after which the next checkpoint is taken.
    :param interval_s: the wanted interval, seconds (``None`` for a fixed step interval).
    :param cost_s: the checkpoint cost C used, seconds.
    :param step_time_s: the step time used to convert seconds to steps.
    """

    next_step: int
    interval_s: float | None
    cost_s: float | None
    step_time_s: float | None


def young_daly_s(cost_s: float, mtbf_s: float) -> float:
    """Young/Daly optimal checkpoint interval ``sqrt(2 x C x M)``, seconds."""
    return math.sqrt(2.0 * max(cost_s, 0.0) * mtbf_s)


class CheckpointSchedule:
    """Decides after which steps to checkpoint.

    :param config: interval policy and bounds.
    :param num_nodes: nodes in the job (divides the per-node MTBF).
    :param start_step: the step training starts from (0, or the resumed checkpoint's).
    """

    def __init__(self, config: CheckpointSection, num_nodes: int, start_step: int) -> None:
        self.config = config
        self.mtbf_s = config.mtbf_node_s / max(1, num_nodes)
        self.plan = IntervalPlan(start_step + config.interval_steps, None, None, None)

    def due(self, step: int) -> bool:
        """Whether a checkpoint is due after ``step`` steps."""
        return step >= self.plan.next_step

    def plan_first(self, step: int) -> IntervalPlan:
        """The next save after one at ``step`` when no cost was measured yet."""
        self.plan = IntervalPlan(step + self.config.interval_steps, None, None, None)
        return self.plan

    def plan_after_save(
        self, step: int, cost_s: float, step_time_s: float, write_s: float | None
    ) -> IntervalPlan:
        """Plan the next save after one at ``step``; inputs must be agreed across ranks.

        :param cost_s: the save's stall, seconds (the C of Young/Daly).
        :param step_time_s: recent mean step time, seconds.
        :param write_s: how long the previous complete write took, seconds; the interval is
            at least :data:`WRITE_MULTIPLE` times as long.
        """
        config = self.config
        if config.interval == "steps":
            self.plan = IntervalPlan(step + config.interval_steps, None, None, None)
            return self.plan
        interval_s = max(young_daly_s(cost_s, self.mtbf_s), WRITE_MULTIPLE * (write_s or 0.0))
        steps = interval_s / step_time_s if step_time_s > 0 else config.interval_steps
        bounded = min(max(round(steps), config.min_interval_steps), config.max_interval_steps)
        self.plan = IntervalPlan(step + bounded, interval_s, cost_s, step_time_s)
        return self.plan
