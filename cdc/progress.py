"""The follower's running figures: throughput, lag, slot lag in bytes and seconds, and the age
of the slot's restart point; kept in a :class:`cdc.status.FollowerStatus`.

Postgres keeps no time per WAL position, so the follower samples the server's current WAL
position once per status write and dates a position by the first sample that had passed it:
"the WAL was written past the slot's restart point at least N seconds ago".
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from cdc.slot import SlotState
from cdc.status import FollowerStatus
from warehouse.changes import Position, format_lsn

_RATE_WINDOW_S = 10.0
_WAL_SAMPLES = 4096  # one per status write (>= 1 s apart): over an hour of history


@dataclass(frozen=True)
class BatchReport:
    """One applied batch. ``lags_s``: per transaction, Postgres commit to warehouse commit;
    ``apply_s``: seconds the warehouse commit took."""

    snapshot_id: int
    position: Position
    transactions: int
    changes: int
    lags_s: tuple[float, ...]
    applied_at: float  # Unix time, seconds
    apply_s: float = 0.0


class Progress:
    """Folds batch reports and slot states into the status document."""

    def __init__(self, status: FollowerStatus) -> None:
        self.status = status
        self._rates: deque[tuple[float, int]] = deque()
        self._wal: deque[tuple[float, int]] = deque(maxlen=_WAL_SAMPLES)

    def record_batch(self, report: BatchReport) -> None:
        status = self.status
        status.snapshot_id = report.snapshot_id
        status.position_lsn = format_lsn(report.position.lsn)
        status.commit_lsn = format_lsn(report.position.commit_lsn)
        if report.lags_s:
            status.lag_s = round(max(report.lags_s), 4)
            status.max_lag_s = max(status.max_lag_s or 0.0, status.lag_s)
        status.changes_total += report.changes
        status.transactions_total += report.transactions
        status.batches_total += 1
        status.last_batch_changes = report.changes
        status.last_batch_s = round(report.apply_s, 4)
        status.state = "streaming"
        now = time.monotonic()
        self._rates.append((now, report.changes))
        while self._rates and now - self._rates[0][0] > _RATE_WINDOW_S:
            self._rates.popleft()
        span = max(now - self._rates[0][0], 1.0)
        status.rows_per_s = round(sum(n for _, n in self._rates) / span, 1)

    def record_slot(self, state: SlotState | None) -> None:
        """Slot lag in bytes and seconds, WAL retained, and the restart point's age."""
        if state is None:
            return
        now = time.time()
        self._wal.append((now, state.wal_lsn))
        status = self.status
        status.slot_lag_bytes = state.lag_bytes
        status.slot_retained_bytes = state.retained_bytes
        status.slot_lag_s = round(self._age(state.confirmed_flush_lsn, now), 3)
        if state.restart_lsn is not None:
            status.slot_restart_age_s = round(self._age(state.restart_lsn, now), 3)

    def _age(self, lsn: int, now: float) -> float:
        """Seconds since the WAL was first seen past ``lsn`` (0 if it is not yet)."""
        passed_at = None
        for sampled_at, wal_lsn in reversed(self._wal):
            if wal_lsn <= lsn:
                break
            passed_at = sampled_at
        return 0.0 if passed_at is None else max(0.0, now - passed_at)
