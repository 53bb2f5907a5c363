"""The CDC follower: initial snapshot, then stream the slot into the warehouse until stopped.

Exactly-once by construction: a batch of whole transactions and the position it reaches
commit in one warehouse transaction; the slot is confirmed only afterwards; on (re)start the
warehouse's position is read back, streaming restarts from it and everything at or below it
is skipped; and a row is replaced only by a newer ``(commit LSN, seq)``, so a replayed batch
changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import psycopg

from cdc.backfill import Backfiller
from cdc.batch import PendingBatch
from cdc.config import CdcConfig
from cdc.errors import CdcError, PreflightError, SlotDroppedError
from cdc.liveness import Report, Reporter
from cdc.progress import BatchReport, Progress
from cdc.slot import SlotState, slot_state
from cdc.snapshot import take_snapshot
from cdc.source import connect, preflight
from cdc.status import FollowerStatus, utc_now, write_status
from cdc.stream import ChangeStream
from warehouse.base import Warehouse
from warehouse.changes import Position, format_lsn
from warehouse.errors import WarehouseError

__all__ = ["BatchReport", "Follower", "follow"]

log = logging.getLogger(__name__)
_SLOT_EVERY_S = 1.0


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
    and reported; terminal ones (preflight, a dropped slot) are reported and raised. Reports
    go to the source's ``cdc_writers`` table (``cdc/liveness.py``) and, when given, the
    ``status_path`` file.
    """
    Follower(source_dsn, warehouse, config, status_path, on_batch).run(stop)


class Follower:
    """The follower's state between batches; see :func:`follow`."""

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
        self._stream = ChangeStream(source_dsn, config, warehouse)
        self._backfill = Backfiller(source_dsn, warehouse, config)
        self._stream.on_new_table = self._backfill.request
        self._position: Position | None = None
        self._resnapshot = config.resnapshot
        self._progress = Progress(FollowerStatus(slot=config.slot))
        self._last_status = self._last_slot_read = 0.0
        self._written_batches = 0
        self._last_progress = time.monotonic()
        self._last_maintenance = self._last_flush = time.monotonic()

    @property
    def _status(self) -> FollowerStatus:
        return self._progress.status

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop``, reporting to the source's ``cdc_writers`` table all along
        (:class:`cdc.liveness.Reporter`); the last report says how the follower ended."""
        reporter = Reporter(self._dsn, self._report, self._config.report_interval_s)
        try:
            try:
                self._loop(stop)
            except BaseException as error:
                self._fail(error)
                raise
            finally:
                self._stream.close()
            self._status.state = "stopped"
            self._write_status(force=True)
        finally:
            reporter.close()

    def _loop(self, stop: threading.Event) -> None:
        """Known transient errors are retried with backoff; terminal ones stop the follower.
        An error of a kind it does not know is retried the same way (the warehouse's position
        makes a retry safe) up to ``config.unexpected_retries`` times in a row, with its
        traceback in the log, so that one odd failure does not end the stream while a
        persistent one still stops it."""
        backoff = self._config.retry_initial_s
        unexpected = 0
        while not stop.is_set():
            try:
                if self._position is None:
                    self._start()
                self._step()
                backoff, unexpected = self._config.retry_initial_s, 0
            except Exception as error:
                if isinstance(error, (CdcError, WarehouseError, psycopg.OperationalError)):
                    if not getattr(error, "retryable", True):
                        raise
                else:
                    unexpected += 1
                    if unexpected > self._config.unexpected_retries:
                        raise
                    log.exception(
                        "unexpected error in the CDC follower (%d of %d retries)",
                        unexpected,
                        self._config.unexpected_retries,
                    )
                self._retry_after(error)
                stop.wait(backoff)
                backoff = min(backoff * 2, self._config.retry_max_s)

    def _report(self) -> Report:
        """What the reporter writes: the state, the warehouse's position and every figure
        of the status document (called on the reporter's thread)."""
        status = self._status
        return Report(
            slot=self._config.slot,
            kind="follower",
            state=status.state,
            report_interval_s=self._config.report_interval_s,
            advance_interval_s=self._config.heartbeat_interval_s,
            position=self._position,
            last_error=status.last_error,
            last_error_at=status.last_error_at,
            errors_total=status.errors_total,
            started_at=status.started_at,
            status=asdict(status),
        )

    def _start(self) -> None:
        with connect(self._dsn) as conn:
            preflight(conn, self._config)
            slot = slot_state(conn, self._config.slot)
        position = self._warehouse.position()
        if position is None or self._resnapshot:
            position = self._snapshot()
        else:
            self._check_slot(position, slot)
        self._stream.start(position.lsn)  # confirms it: a crash may have come before that
        self._backfill.request_unloaded()
        self._position = position
        self._status.state = "streaming"
        self._status.position_lsn = format_lsn(position.lsn)
        self._write_status(force=True)

    def _check_slot(self, position: Position, slot: SlotState | None) -> None:
        name = self._config.slot
        if position.slot != name:
            raise PreflightError(
                f"the warehouse follows slot {position.slot!r}, not {name!r}; configure that "
                "slot or re-snapshot",
                slot=name,
                warehouse_slot=position.slot,
            )
        if slot is None:
            raise SlotDroppedError(
                f"replication slot {name!r} is gone but the warehouse is at "
                f"{format_lsn(position.lsn)}: changes since then are lost to the stream; "
                "take a new initial snapshot explicitly (`quarry cdc follow --resnapshot`)",
                slot=name,
                lsn=position.lsn,
            )
        if slot.confirmed_flush_lsn > position.lsn:
            raise CdcError(
                f"replication slot {name!r} is at {format_lsn(slot.confirmed_flush_lsn)}, "
                f"past the warehouse's position {format_lsn(position.lsn)} (was the warehouse "
                "restored?); re-snapshot with `quarry cdc follow --resnapshot`",
                slot=name,
            )

    def _snapshot(self) -> Position:
        self._status.state = "snapshotting"
        self._write_status(force=True)
        report = take_snapshot(self._dsn, self._warehouse, self._config)
        self._resnapshot = False
        self._status.snapshot_id = report.snapshot_id
        self._status.snapshot_rows, self._status.snapshot_s = report.rows, report.seconds
        return report.position

    def _step(self) -> None:
        batch = self._stream.take(self._config.poll_interval_s)
        if batch is not None:
            self._apply(batch)
        elif time.monotonic() - self._last_progress >= self._config.heartbeat_interval_s:
            self._stream.heartbeat()
            self._last_progress = time.monotonic()
        if self._backfill.pending and self._position is not None:
            self._status.backfilled_rows += self._backfill.run(self._position)
        if time.monotonic() - self._last_maintenance >= self._config.maintenance_interval_s:
            self._maintain()
        elif time.monotonic() - self._last_flush >= self._config.flush_interval_s:
            self._warehouse.flush_inlined()
            self._last_flush = time.monotonic()
        self._write_status()

    def _maintain(self) -> None:
        """Warehouse upkeep; a failure is reported and retried at the next interval, it does
        not stop the stream."""
        self._last_maintenance = time.monotonic()
        try:
            report = self._warehouse.maintain()
        except WarehouseError as error:
            log.warning("warehouse maintenance failed (retried later): %s", error)
            self._note_error(error)
            return
        self._status.maintenance_total += 1
        self._status.maintenance_s = round(report.seconds, 3)
        self._status.tombstones_purged_total += report.purged
        log.info(
            "warehouse maintenance: expired %d snapshots (%d kept for manifests), purged %d "
            "tombstones in %.2f s",
            len(report.expired),
            len(report.protected),
            report.purged,
            report.seconds,
        )

    def _apply(self, pending: PendingBatch) -> None:
        assert self._position is not None
        batch = pending.change_batch(self._position)
        started = time.monotonic()
        snapshot_id = self._warehouse.apply(batch)
        applied_at = time.time()
        self._stream.confirm(batch.position.lsn)
        self._position = batch.position
        self._last_progress = time.monotonic()
        lags = tuple(max(0.0, applied_at - c.commit_ts_ms / 1000) for c in pending.commits)
        report = BatchReport(
            snapshot_id,
            batch.position,
            len(pending.commits),
            pending.changes,
            lags,
            applied_at,
            self._last_progress - started,
        )
        self._progress.record_batch(report)
        if self._on_batch is not None:
            self._on_batch(report)

    def _retry_after(self, error: BaseException) -> None:
        log.warning("CDC follower will retry after: %s", error)
        self._status.state = "retrying"  # before the stream closes its slot connection
        self._stream.close()
        self._position = None  # re-read the warehouse's position: it is authoritative
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
        """Rewrite the status file when forced, after a batch, or once a second; the slot's
        state (a query on the source) is read at most once a second."""
        if self._status_path is None:
            return
        now = time.monotonic()
        batches = self._status.batches_total
        if not force and batches == self._written_batches and now - self._last_status < 1.0:
            return
        self._written_batches = batches
        if self._position is not None and now - self._last_slot_read >= _SLOT_EVERY_S:
            self._last_slot_read = now
            try:
                self._progress.record_slot(self._stream.state())
            except CdcError as error:
                log.debug("slot state unavailable: %s", error)
        self._last_status = now
        write_status(self._status_path, self._status)
