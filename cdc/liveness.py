"""Whether the warehouse's CDC writer is alive and advancing, judged from Postgres alone.

A writer reports into the unlogged table ``cdc_writers`` (``sql/postgres/0004``): the
follower about once a second from a thread of its own (:class:`Reporter`), the Debezium
endpoint at every request. :func:`observe` reads that row, the slot's replication connection
(``pg_replication_slots``) and the source's WAL position in one query, with Postgres's clock;
:func:`judge` turns it into a :class:`Liveness`. Nothing here reads a local pid or file, so
the judgement is the same for a follower on another machine and for a Debezium-fed warehouse.

The judged states (docs/cdc.md, "Liveness"):

- ``down``: no writer has reported for the slot; or it reported ``failed`` or ``stopped``; or,
  for a follower, its slot has no replication connection or does not exist (Postgres drops a
  dead client's connection at once), or it has not reported for
  ``MISSED_REPORTS`` report intervals and its connection is gone;
- ``stalled``: it has not reported for ``MISSED_REPORTS`` report intervals although its
  connection is open (a paused or hung process; for Debezium, no request for that long), or
  its position has not advanced for ``MISSED_ADVANCES`` advance intervals while the source's
  WAL is past it;
- otherwise the state it reported: ``streaming`` (the one healthy state), ``starting``,
  ``snapshotting``, ``retrying``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from warehouse.backends import open_warehouse
from warehouse.changes import Position, format_lsn
from warehouse.config import WarehouseConfig
from warehouse.errors import WarehouseError

log = logging.getLogger(__name__)

#: A writer silent for this many report intervals is stalled (connection open) or down.
MISSED_REPORTS = 5
#: A position that has not moved for this many advance intervals, with WAL past it, is stalled.
MISSED_ADVANCES = 3
#: Judged states; ``streaming`` is the healthy one.
STATES = ("starting", "snapshotting", "streaming", "retrying", "stalled", "down")
_CONNECT_TIMEOUT_S = 5

_REPORT = """
INSERT INTO cdc_writers AS w (slot, kind, state, host, pid, position_lsn, commit_at,
    advanced_at, seen_at, report_interval_s, advance_interval_s, last_error, last_error_at,
    errors_total, started_at, status)
VALUES (%(slot)s, %(kind)s, %(state)s, %(host)s, %(pid)s, %(lsn)s::pg_lsn,
    to_timestamp(%(commit_s)s::float8),
    CASE WHEN %(lsn)s::pg_lsn IS NULL THEN NULL ELSE clock_timestamp() END, clock_timestamp(),
    %(report_s)s, %(advance_s)s, %(error)s, %(error_at)s::timestamptz, %(errors)s,
    COALESCE(%(started_at)s::timestamptz, clock_timestamp()), %(status)s::jsonb)
ON CONFLICT (slot) DO UPDATE SET
    kind = EXCLUDED.kind, state = EXCLUDED.state, host = EXCLUDED.host, pid = EXCLUDED.pid,
    position_lsn = COALESCE(EXCLUDED.position_lsn, w.position_lsn),
    commit_at = COALESCE(EXCLUDED.commit_at, w.commit_at),
    advanced_at = CASE
        WHEN EXCLUDED.position_lsn IS NOT NULL AND (
            EXCLUDED.position_lsn IS DISTINCT FROM w.position_lsn
            OR EXCLUDED.commit_at IS DISTINCT FROM w.commit_at)
        THEN clock_timestamp() ELSE w.advanced_at END,
    seen_at = clock_timestamp(),
    report_interval_s = EXCLUDED.report_interval_s,
    advance_interval_s = EXCLUDED.advance_interval_s,
    last_error = CASE WHEN %(keep)s THEN w.last_error ELSE EXCLUDED.last_error END,
    last_error_at = CASE WHEN %(keep)s THEN w.last_error_at ELSE EXCLUDED.last_error_at END,
    errors_total = CASE WHEN %(keep)s THEN w.errors_total ELSE EXCLUDED.errors_total END,
    started_at = CASE WHEN %(keep)s THEN w.started_at ELSE EXCLUDED.started_at END,
    status = EXCLUDED.status
"""
_ERROR = """
UPDATE cdc_writers SET last_error = %s, last_error_at = clock_timestamp(),
    errors_total = errors_total + 1, seen_at = clock_timestamp()
WHERE slot = %s
"""
_OBSERVE = """
SELECT w.kind, w.state, w.host, w.pid, (w.position_lsn - '0/0'::pg_lsn)::bigint,
       extract(epoch FROM clock_timestamp() - w.seen_at)::float8,
       extract(epoch FROM clock_timestamp() - w.advanced_at)::float8,
       extract(epoch FROM clock_timestamp() - w.commit_at)::float8,
       w.report_interval_s, w.advance_interval_s, w.last_error, w.last_error_at,
       w.errors_total, w.started_at, w.status,
       s.active, (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint
FROM (VALUES (%s::text)) AS q (slot)
LEFT JOIN cdc_writers AS w ON w.slot = q.slot
LEFT JOIN pg_replication_slots AS s ON s.slot_name = q.slot
"""


@dataclass(frozen=True)
class Report:
    """What a writer says about itself. Intervals in seconds: ``report_interval_s`` is how
    often it reports, ``advance_interval_s`` the longest its position stays put while it
    works (the follower's ``heartbeat_interval_s``). ``keep_errors``: leave the row's error
    fields and start time as they are (the Debezium endpoint, which sees requests, not a
    process)."""

    slot: str
    kind: str  # follower, debezium
    state: str
    report_interval_s: float
    advance_interval_s: float
    position: Position | None = None
    last_error: str | None = None
    last_error_at: str | None = None  # ISO 8601
    errors_total: int = 0
    started_at: str | None = None  # ISO 8601; None: now
    status: dict[str, Any] | None = None
    keep_errors: bool = False
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)


def report(conn: psycopg.Connection[Any], what: Report) -> None:
    """Write ``what`` as its slot's row (``conn`` in autocommit, or committed by the caller)."""
    position = what.position
    commit_ms = position.commit_ts_ms if position is not None else None
    conn.execute(
        _REPORT,
        {
            "slot": what.slot,
            "kind": what.kind,
            "state": what.state,
            "host": what.host,
            "pid": what.pid,
            "lsn": format_lsn(position.lsn) if position is not None else None,
            "commit_s": commit_ms / 1000 if commit_ms is not None else None,
            "report_s": what.report_interval_s,
            "advance_s": what.advance_interval_s,
            "error": what.last_error,
            "error_at": what.last_error_at,
            "errors": what.errors_total,
            "started_at": what.started_at,
            "status": json.dumps(what.status) if what.status is not None else None,
            "keep": what.keep_errors,
        },
    )


def report_error(conn: psycopg.Connection[Any], slot: str, error: str) -> None:
    """Record ``error`` as the last error of ``slot``'s writer (if it has reported before)."""
    conn.execute(_ERROR, (error, slot))


@dataclass(frozen=True)
class Liveness:
    """The judgement on one slot's writer; ages and lag in seconds (Postgres's clock).

    ``warehouse_lag_s``: how far the warehouse's data is behind the source now, at most
    (now minus the source commit time of the last transaction or heartbeat its position
    covers). ``connected``: the slot has a replication connection (``None``: Postgres has no
    slot of that name, as for a Debezium connector's)."""

    slot: str
    state: str
    reason: str | None = None
    kind: str | None = None
    reported_state: str | None = None
    host: str | None = None
    pid: int | None = None
    connected: bool | None = None
    last_seen_s: float | None = None
    last_advance_s: float | None = None
    warehouse_lag_s: float | None = None
    position_lsn: str | None = None
    source_lsn: str | None = None
    wal_behind_bytes: int | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    errors_total: int = 0
    started_at: str | None = None
    status: dict[str, Any] | None = None

    @property
    def healthy(self) -> bool:
        return self.state == "streaming"

    def to_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, **asdict(self)}


@dataclass(frozen=True)
class WriterRow:
    """A writer's row as :func:`observe` reads it; ages (``*_s``) in seconds, on Postgres's
    clock: since it reported, since its position moved, since the commit time its position
    covers."""

    kind: str
    state: str
    host: str | None
    pid: int | None
    position_lsn: int | None
    seen_s: float
    advance_s: float | None
    commit_s: float | None
    report_interval_s: float
    advance_interval_s: float
    last_error: str | None
    last_error_at: datetime | None
    errors_total: int
    started_at: datetime
    status: dict[str, Any] | None


@dataclass(frozen=True)
class Observation:
    """One read of the source: the writer's row (``None``: it never reported), whether the
    slot has a replication connection (``None``: no such slot) and the WAL position now."""

    slot: str
    writer: WriterRow | None
    slot_active: bool | None
    wal_lsn: int


def observe(conn: psycopg.Connection[Any], slot: str) -> Observation:
    row = conn.execute(_OBSERVE, (slot,)).fetchone()
    assert row is not None  # one row by construction
    writer = None if row[0] is None else WriterRow(*row[:15])
    return Observation(slot, writer, row[15], int(row[16]))


def judge(seen: Observation) -> Liveness:
    """The judged state of ``seen``'s writer; see the module docstring."""
    writer = seen.writer
    if writer is None:
        return Liveness(seen.slot, "down", f"no CDC writer has reported for slot {seen.slot!r}")
    state, reason = _verdict(seen, writer)
    behind = None if writer.position_lsn is None else max(0, seen.wal_lsn - writer.position_lsn)
    return Liveness(
        slot=seen.slot,
        state=state,
        reason=reason,
        kind=writer.kind,
        reported_state=writer.state,
        host=writer.host,
        pid=writer.pid,
        connected=seen.slot_active,
        last_seen_s=_round(writer.seen_s),
        last_advance_s=_round(writer.advance_s),
        warehouse_lag_s=_round(writer.commit_s),
        position_lsn=None if writer.position_lsn is None else format_lsn(writer.position_lsn),
        source_lsn=format_lsn(seen.wal_lsn),
        wal_behind_bytes=behind,
        last_error=writer.last_error,
        last_error_at=_iso(writer.last_error_at),
        errors_total=int(writer.errors_total),
        started_at=_iso(writer.started_at),
        status=writer.status,
    )


def _verdict(seen: Observation, writer: WriterRow) -> tuple[str, str | None]:
    if writer.state in ("failed", "stopped"):
        error = f": {writer.last_error}" if writer.last_error else ""
        return "down", f"it {writer.state}{error}"
    silent_after = MISSED_REPORTS * writer.report_interval_s
    silent = writer.seen_s > silent_after
    follower = writer.kind == "follower"
    if follower and not seen.slot_active and (silent or writer.state == "streaming"):
        gone = "does not exist" if seen.slot_active is None else "has no replication connection"
        return "down", f"replication slot {seen.slot!r} {gone}: the follower is not running"
    if silent:
        what = "no report" if follower else "no request from Debezium"
        return "stalled", f"{what} for {writer.seen_s:.1f} s (more than {silent_after:g} s)"
    stuck_after = MISSED_ADVANCES * writer.advance_interval_s
    behind = writer.position_lsn is not None and seen.wal_lsn > writer.position_lsn
    if writer.state == "streaming" and behind and (writer.advance_s or 0.0) > stuck_after:
        return "stalled", (
            f"its position {format_lsn(writer.position_lsn or 0)} has not advanced for "
            f"{writer.advance_s:.1f} s (more than {stuck_after:g} s) while the source's WAL "
            f"is at {format_lsn(seen.wal_lsn)}"
        )
    if writer.state == "streaming":
        return "streaming", None
    return writer.state, f"it is {writer.state}" + (
        f" after: {writer.last_error}" if writer.state == "retrying" and writer.last_error else ""
    )


def liveness_at(dsn: str, slot: str) -> Liveness:
    """The judgement on ``slot``'s writer, read from the source database at ``dsn``; when the
    database cannot be read, ``down`` with why."""
    try:
        with psycopg.connect(dsn, connect_timeout=_CONNECT_TIMEOUT_S, autocommit=True) as conn:
            return read_liveness(conn, slot)
    except psycopg.Error as error:
        return unreadable(slot, error)


def read_liveness(conn: psycopg.Connection[Any], slot: str) -> Liveness:
    """:func:`judge` of :func:`observe` on an open connection (errors propagate)."""
    return judge(observe(conn, slot))


def unreadable(slot: str, error: BaseException) -> Liveness:
    """The judgement when the source database cannot be read."""
    detail = str(error).strip() or type(error).__name__
    if isinstance(error, psycopg.errors.UndefinedTable):
        detail = "table cdc_writers is missing: apply Quarry's migrations (sql/postgres/)"
    return Liveness(slot, "down", f"cannot read the CDC writers' reports: {detail}")


def writer_slot(config: WarehouseConfig, default: str) -> str:
    """The slot of the writer that feeds the warehouse: its position's (``debezium:<name>``
    for a Debezium-fed one), or ``default`` before it has a position or when it cannot be
    read."""
    try:
        with open_warehouse(config) as warehouse:
            position = warehouse.position()
    except WarehouseError as error:
        log.debug("warehouse position unavailable: %s", error)
        return default
    return position.slot if position is not None else default


class Reporter:
    """Reports ``make()`` every ``interval_s`` seconds from a thread of its own, on its own
    connection, so that a long batch or maintenance run does not read as silence; a failed
    write is logged and tried again at the next interval. :meth:`close` stops the thread and
    writes one last report."""

    def __init__(self, dsn: str, make: Callable[[], Report], interval_s: float) -> None:
        self._dsn, self._make, self._interval = dsn, make, interval_s
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(target=self._run, name="quarry-cdc-report", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._send()
            if self._stop.wait(self._interval):
                return

    def _send(self) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self._dsn,
                    autocommit=True,
                    connect_timeout=_CONNECT_TIMEOUT_S,
                    application_name="quarry-cdc-report",
                )
            report(self._conn, self._make())
        except psycopg.Error as error:
            log.debug("CDC liveness report failed: %s", error)
            self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self._interval + 2 * _CONNECT_TIMEOUT_S)
        if not self._thread.is_alive():  # else it still holds the connection: skip the last
            self._send()
            self._drop()


def _round(value: float | None) -> float | None:
    return None if value is None else round(max(0.0, float(value)), 3)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()
