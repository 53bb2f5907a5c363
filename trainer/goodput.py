"""Goodput accounting: where a run's wall time went, across restarts.

Wall time since the run started is split into initialization, data wait, compute, checkpoint
stall and recovery; ``goodput_fraction`` is compute over the total. Recovery is everything a
failure cost: the work done since the checkpoint the run resumed from (it is redone), the time
from the failure to the first step completed after the restart (detection, restart, init,
reload). The ledger is snapshotted into each checkpoint's commit record, so a restarted run
resumes its accounting from the checkpoint it resumes from.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

LOSS_WINDOW = 10
"""Steps averaged for the loss at the start and at the end of a run."""


class Phase(enum.StrEnum):
    """Where wall time goes."""

    INIT = "initialization"
    DATA_WAIT = "data_wait"
    COMPUTE = "compute"
    CHECKPOINT = "checkpoint_stall"
    RECOVERY = "recovery"


@dataclass
class Ledger:
    """Seconds per phase since the run started, and what they produced.

    :param run_started_wall: Unix time the run's first attempt started, seconds.
    :param seconds: seconds per phase.
    :param steps: optimizer steps whose work is kept; :param samples: samples they consumed.
    :param losses: the first losses of the run (kept to report the start of the curve).
    :param snapshot_wall: Unix time the ledger was last snapshotted, seconds.
    """

    run_started_wall: float
    seconds: dict[Phase, float] = field(default_factory=lambda: dict.fromkeys(Phase, 0.0))
    steps: int = 0
    samples: int = 0
    losses: list[float] = field(default_factory=list)
    snapshot_wall: float | None = None

    def add(self, phase: Phase, seconds: float) -> None:
        """Charge ``seconds`` to ``phase``."""
        self.seconds[phase] += max(0.0, seconds)

    @property
    def total_s(self) -> float:
        """Seconds accounted for, all phases."""
        return sum(self.seconds.values())

    @property
    def goodput_fraction(self) -> float:
        """Compute seconds over all seconds accounted for (0 when nothing is)."""
        total = self.total_s
        return self.seconds[Phase.COMPUTE] / total if total > 0 else 0.0

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready copy, stamped with the current Unix time."""
        return {
            "run_started_wall": self.run_started_wall,
            "seconds": {str(p): s for p, s in self.seconds.items()},
            "steps": self.steps,
            "samples": self.samples,
            "losses": list(self.losses),
            "snapshot_wall": time.time(),
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> Ledger:
        """Rebuild a ledger from :meth:`snapshot`'s output."""
        seconds = dict.fromkeys(Phase, 0.0)
        for name, value in data.get("seconds", {}).items():
            seconds[Phase(name)] = float(value)
        return cls(
            run_started_wall=float(data["run_started_wall"]),
            seconds=seconds,
            steps=int(data.get("steps", 0)),
            samples=int(data.get("samples", 0)),
            losses=[float(v) for v in data.get("losses", [])],
            snapshot_wall=data.get("snapshot_wall"),
        )


@dataclass(frozen=True)
class Recovery:
    """What the last failure cost.

    :param failure_wall: Unix time of the failure (the injected fault's record, else the last
        progress heartbeat before it), seconds.
    :param lost_work_s: wall time between the resumed checkpoint's snapshot and the failure.
    :param recovery_s: failure to the end of the first step after the restart (set later).
    """

    failure_wall: float
    lost_work_s: float
    recovery_s: float | None = None


def resume_ledger(
    base: dict[str, Any] | None, run_started_wall: float, failure_wall: float
) -> tuple[Ledger, Recovery]:
    """The ledger of a restarted attempt, from the resumed checkpoint's snapshot.

    With no checkpoint, all the run's time until the failure is lost work.
    """
    if base is None:
        ledger = Ledger(run_started_wall=run_started_wall)
        lost = failure_wall - run_started_wall
    else:
        ledger = Ledger.from_snapshot(base)
        lost = failure_wall - float(ledger.snapshot_wall or failure_wall)
    ledger.add(Phase.RECOVERY, lost)
    return ledger, Recovery(failure_wall=failure_wall, lost_work_s=max(0.0, lost))


class GoodputMeter:
    """Times phases into a :class:`Ledger`; during recovery, time goes to recovery instead.

    :param ledger: the run's ledger (fresh, or resumed).
    :param attempt_started_wall: Unix time this worker process started, seconds.
    :param recovery: set on a restarted attempt: until the first step completes, every second
        since the failure is recovery.
    """

    def __init__(
        self, ledger: Ledger, attempt_started_wall: float, recovery: Recovery | None = None
    ) -> None:
        self.ledger = ledger
        self.attempt_started_wall = attempt_started_wall
        self.recovery = recovery
        self.recovering = recovery is not None
        self.step_seconds: list[float] = []
        self.wait_seconds: list[float] = []
        self.sites: dict[str, float] = {}
        self.data_sites: dict[str, float] = dict.fromkeys(DATA_SITES, 0.0)
        self.gc = GcPauses()
        self.recent_losses: deque[float] = deque(maxlen=LOSS_WINDOW)
        self._first_step_started: float | None = None

    def start_training(self) -> None:
        """Initialization ends here (charged to recovery on a restarted attempt)."""
        now = time.time()
        if not self.recovering:
            self.ledger.add(Phase.INIT, now - self.attempt_started_wall)
        self._first_step_started = now

    @contextmanager
    def phase(self, phase: Phase, site: str | None = None) -> Iterator[None]:
        """Charge the block's wall time to ``phase`` (unless recovering).

        ``site`` names where in the loop the time went (kept per site, for the summary).
        """
        started = time.perf_counter()
        try:
            yield
        finally:
            if not self.recovering:
                seconds = time.perf_counter() - started
                self.ledger.add(phase, seconds)
                if site is not None:
                    self.sites[site] = self.sites.get(site, 0.0) + seconds

    def record_step(
        self,
        data_wait_s: float,
        compute_s: float,
        samples: int,
        loss: float,
        epoch_start_s: float = 0.0,
    ) -> None:
        """Charge one completed step's data wait and compute, and count it.

        :param data_wait_s: seconds the step was blocked waiting for its batch.
        :param epoch_start_s: seconds it spent starting an epoch's workers (also data wait).

        The first step after a restart closes the recovery instead (its time is recovery).
        """
        wait = data_wait_s + epoch_start_s
        if not self.recovering:
            self.ledger.add(Phase.DATA_WAIT, wait)
            self.ledger.add(Phase.COMPUTE, compute_s)
            self.wait_seconds.append(wait)
            self.data_sites["blocked"] += data_wait_s
            self.data_sites["epoch_start"] += epoch_start_s
        self.end_step(samples, loss, wait + compute_s)

    def end_step(
        self, samples: int, loss: float, step_s: float, keep_losses: int = LOSS_WINDOW
    ) -> None:
        """Count one completed step; the first one after a restart closes the recovery."""
        if self.recovering and self.recovery is not None:
            recovery_s = time.time() - self.recovery.failure_wall
            self.ledger.add(Phase.RECOVERY, recovery_s)
            self.recovery = Recovery(
                self.recovery.failure_wall, self.recovery.lost_work_s, recovery_s
            )
            self.recovering = False
        else:
            self.step_seconds.append(step_s)
        self.ledger.steps += 1
        self.ledger.samples += samples
        self.recent_losses.append(loss)
        if len(self.ledger.losses) < keep_losses:
            self.ledger.losses.append(loss)

    def data_wait_share(self, warmup_steps: int = 0) -> float | None:
        """Data wait over step time, leaving out this attempt's first ``warmup_steps`` steps
        (``None`` when no step is left)."""
        steps, waits = self.step_seconds[warmup_steps:], self.wait_seconds[warmup_steps:]
        total = sum(steps)
        return sum(waits) / total if total > 0 and len(steps) == len(waits) else None

    def mean_step_s(self, last: int = 50) -> float:
        """Mean wall time of the last ``last`` steps (data wait plus compute), seconds."""
        recent = self.step_seconds[-last:]
        return sum(recent) / len(recent) if recent else 0.0


DATA_SITES = ("blocked", "epoch_start")
"""Where data wait goes: blocked on the next batch; starting an epoch's workers in the step."""


class GcPauses:
    """Adds up the cyclic garbage collector's pauses in this process: a ``gc.callbacks`` entry
    (the trainer freezes its heap after setup, see ``trainer.worker.freeze_heap``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self.longest_s = 0.0
        self.full = 0  # collections of the oldest generation
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        self.seconds += pause
        self.count += 1
        self.longest_s = max(self.longest_s, pause)
        self.full += info.get("generation") == 2


class Timeline:
    """Named marks (Unix time) from a start, for the breakdown of initialization.

    :param started_wall: Unix time of the start, seconds.
    """

    def __init__(self, started_wall: float) -> None:
        self.marks: list[tuple[str, float]] = [("start", started_wall)]

    def mark(self, name: str) -> None:
        """Close the span ``name`` now."""
        self.marks.append((name, time.time()))

    def durations(self) -> dict[str, float]:
        """Seconds of each span, in order."""
        return {
            name: round(at - before, 3)
            for (_, before), (name, at) in zip(self.marks, self.marks[1:], strict=False)
        }


def mfu(flops_per_step: float, step_s: float, peak_flops: float) -> float:
    """Model FLOPs utilization of one device: achieved FLOP/s over its peak."""
    if step_s <= 0 or peak_flops <= 0:
        return 0.0
    return flops_per_step / step_s / peak_flops
