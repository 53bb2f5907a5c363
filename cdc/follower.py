"""The CDC follower: initial snapshot, then poll the slot into the warehouse until stopped.

Exactly-once by construction: a batch of whole transactions and the position it reaches
commit in one warehouse transaction; the slot is advanced only afterwards; on (re)start the
warehouse's position is read back and everything at or below it is skipped; and a row is
replaced only by a newer ``(commit LSN, seq)``, so a replayed batch changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from cdc.config import CdcConfig
from cdc.errors import CdcError, PreflightError, SlotDroppedError
from cdc.slot import slot_state
from cdc.snapshot import take_snapshot
from cdc.source import connect, preflight
from cdc.status import FollowerStatus, utc_now, write_status
from cdc.stream import ChangeStream
from cdc.transactions import Transaction
from warehouse.base import Warehouse
from warehouse.changes import ChangeBatch, Position, format_lsn
from warehouse.errors import WarehouseError

log = logging.getLogger(__name__)
_STATUS_EVERY_S = 1.0
_RATE_WINDOW_S = 10.0


@dataclass(frozen=True)
class BatchReport:
    """One applied batch. ``lags_s``: per transaction, Postgres commit to warehouse commit."""

    snapshot_id: int
    position: Position
    transactions: int
    changes: int
    lags_s: tuple[float, ...]
    applied_at: float  # Unix time, seconds


def follow(
    source_dsn: str,
    warehouse: Warehouse,
    config: CdcConfig,
    stop: threading.Event,
    status_path: Path | None = None,
    *,
    on_batch: Callable[[BatchReport], None] | None = None,
) -> None:
    """Mirror the source's publication into ``warehouse`` until ``stop`` is set.

    Takes the initial snapshot when the warehouse has no position (or ``config.resnapshot``),
    then streams. Retryable errors (source or warehouse unreachable) are retried with backoff
    and reported in the status file; terminal ones (preflight, a dropped slot) are written to
    the status file and raised.
    """
    Follower(source_dsn, warehouse, config, status_path, on_batch).run(stop)


class Follower:
    """The follower's state between polls; see :func:`follow`."""

    def __init__(
        self,
        source_dsn: str,
        warehouse: Warehouse,
        config: CdcConfig,
        status_path: Path | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
    ) -> None:
        self._dsn, self._warehouse, self._config = source_dsn, warehouse, config
        self._status_path, self._on_batch = status_path, on_batch
        self._stream = ChangeStream(source_dsn, config)
        self._position: Position | None = None
        self._resnapshot = config.resnapshot
        self._status = FollowerStatus(slot=config.slot)
        self._rates: deque[tuple[float, int]] = deque()
        self._last_status = 0.0
        self._last_progress = time.monotonic()
        self._last_maintenance = time.monotonic()

    def run(self, stop: threading.Event) -> None:
        backoff = self._config.retry_initial_s
        try:
            while not stop.is_set():
                try:
                    if self._position is None:
                        self._start()
                    self._step(stop)
                    backoff = self._config.retry_initial_s
                except (CdcError, WarehouseError, psycopg.OperationalError) as error:
                    if not getattr(error, "retryable", True):
                        raise
                    self._retry_after(error)
                    stop.wait(backoff)
                    backoff = min(backoff * 2, self._config.retry_max_s)
        except BaseException as error:
            self._fail(error)
            raise
        finally:
            self._stream.close()
        self._status.state = "stopped"
        self._write_status(force=True)

    def _start(self) -> None:
        with connect(self._dsn) as conn:
            preflight(conn, self._config)
            slot = slot_state(conn, self._config.slot)
        position = self._warehouse.position()
        if position is None or self._resnapshot:
            position = self._snapshot()
        elif position.slot != self._config.slot:
            raise PreflightError(
                f"the warehouse follows slot {position.slot!r}, not "
                f"{self._config.slot!r}; configure that slot or re-snapshot",
                slot=self._config.slot,
                warehouse_slot=position.slot,
            )
        elif slot is None:
            raise SlotDroppedError(
                f"replication slot {self._config.slot!r} is gone but the warehouse is at "
                f"{format_lsn(position.lsn)}: changes since then are lost to the stream; "
                "take a new initial snapshot explicitly (`quarry cdc follow --resnapshot`)",
                slot=self._config.slot,
                lsn=position.lsn,
            )
        elif slot.confirmed_flush_lsn > position.lsn:
            raise CdcError(
                f"replication slot {self._config.slot!r} is at "
                f"{format_lsn(slot.confirmed_flush_lsn)}, past the warehouse's position "
                f"{format_lsn(position.lsn)} (was the warehouse restored?); re-snapshot with "
                "`quarry cdc follow --resnapshot`",
                slot=self._config.slot,
            )
        self._stream.advance(position.lsn)  # a crash may have come between commit and advance
        self._position = position
        self._status.state = "streaming"
        self._status.position_lsn = format_lsn(position.lsn)
        self._write_status(force=True)

    def _snapshot(self) -> Position:
        self._status.state = "snapshotting"
        self._write_status(force=True)
        report = take_snapshot(self._dsn, self._warehouse, self._config)
        self._resnapshot = False
        self._status.snapshot_id = report.snapshot_id
        self._status.snapshot_rows, self._status.snapshot_s = report.rows, report.seconds
        return report.position

    def _step(self, stop: threading.Event) -> None:
        assert self._position is not None
        poll = self._stream.poll(self._position.lsn)
        if poll.transactions:
            self._apply(poll.transactions)
        if not poll.drained:
            return
        if time.monotonic() - self._last_maintenance >= self._config.maintenance_interval_s:
            self._maintain()
        if time.monotonic() - self._last_progress >= self._config.heartbeat_interval_s:
            self._stream.heartbeat()
            self._last_progress = time.monotonic()
        self._write_status()
        stop.wait(self._config.poll_interval_s)

    def _maintain(self) -> None:
        report = self._warehouse.maintain()
        self._last_maintenance = time.monotonic()
        log.info(
            "warehouse maintenance: expired %d snapshots (%d kept for manifests) in %.2f s",
            len(report.expired),
            len(report.protected),
            report.seconds,
        )

    def _apply(self, transactions: list[Transaction]) -> None:
        assert self._position is not None
        for tx in transactions:
            for relation in tx.relations.values():
                if self._warehouse.ensure_table(self._stream.table_spec(relation)):
                    log.info(
                        "schema of %s.%s changed; warehouse table updated",
                        relation.namespace,
                        relation.name,
                    )
        last = transactions[-1]
        position = Position(
            lsn=last.end_lsn,
            snapshot_lsn=self._position.snapshot_lsn,
            slot=self._config.slot,
            commit_lsn=last.commit_lsn,
            tx_id=last.xid,
            commit_ts_ms=last.commit_ts_ms,
        )
        events = [event for tx in transactions for event in tx.events]
        snapshot_id = self._warehouse.apply(ChangeBatch(events, position))
        applied_at = time.time()
        self._stream.advance(position.lsn)
        self._position = position
        self._last_progress = time.monotonic()
        lags = tuple(max(0.0, applied_at - tx.commit_ts_ms / 1000) for tx in transactions)
        self._record(
            BatchReport(snapshot_id, position, len(transactions), len(events), lags, applied_at)
        )

    def _record(self, report: BatchReport) -> None:
        status = self._status
        status.snapshot_id = report.snapshot_id
        status.position_lsn = format_lsn(report.position.lsn)
        status.commit_lsn = format_lsn(report.position.commit_lsn)
        status.lag_s = max(report.lags_s)
        status.max_lag_s = max(status.max_lag_s or 0.0, status.lag_s)
        status.changes_total += report.changes
        status.transactions_total += report.transactions
        status.batches_total += 1
        status.state = "streaming"
        now = time.monotonic()
        self._rates.append((now, report.changes))
        while self._rates and now - self._rates[0][0] > _RATE_WINDOW_S:
            self._rates.popleft()
        span = max(now - self._rates[0][0], 1.0)
        status.rows_per_s = sum(n for _, n in self._rates) / span
        self._write_status(force=True)
        if self._on_batch is not None:
            self._on_batch(report)

    def _retry_after(self, error: BaseException) -> None:
        log.warning("CDC follower will retry after: %s", error)
        self._stream.close()
        self._position = None  # re-read the warehouse's position: it is authoritative
        self._status.state = "retrying"
        self._note_error(error)

    def _fail(self, error: BaseException) -> None:
        if isinstance(error, KeyboardInterrupt):
            self._status.state = "stopped"
        else:
            log.error("CDC follower stopped: %s", error)
            self._status.state = "failed"
            self._note_error(error)
        self._write_status(force=True)

    def _note_error(self, error: BaseException) -> None:
        self._status.last_error = f"{type(error).__name__}: {error}"
        self._status.last_error_at = utc_now()
        self._status.errors_total += 1
        self._write_status(force=True)

    def _write_status(self, *, force: bool = False) -> None:
        if self._status_path is None:
            return
        now = time.monotonic()
        if not force and now - self._last_status < _STATUS_EVERY_S:
            return
        self._last_status = now
        state = self._stream_state()
        if state is not None:
            self._status.slot_lag_bytes = state
        write_status(self._status_path, self._status)

    def _stream_state(self) -> int | None:
        try:
            state = self._stream.state() if self._position is not None else None
        except CdcError:
            return None
        return None if state is None else state.lag_bytes
