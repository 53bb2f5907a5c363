"""One streaming replication session on the slot (``START_REPLICATION ... LOGICAL``).

psycopg's high-level API cannot hold a COPY BOTH stream, so this talks to libpq through
``psycopg.pq`` directly: the server decodes the WAL once and streams pgoutput messages as
transactions commit, instead of re-decoding from the slot's restart point on every poll.
The client confirms a position (standby status update) only after the warehouse has
committed everything up to it, so the slot never moves past the warehouse.

Wire format (PostgreSQL "Streaming Replication Protocol"): XLogData ``w`` + start LSN (int64)
+ end LSN (int64) + send time (int64 microseconds since 2000-01-01) + payload; primary
keepalive ``k`` + end LSN + send time + reply-requested (byte); standby status update ``r`` +
written, flushed, applied LSNs + client time + reply-requested.
"""

from __future__ import annotations

import select
import struct
import time
from enum import Enum

import psycopg
from psycopg import pq, sql

from cdc.errors import CdcError, SlotDroppedError, SourceUnavailableError
from cdc.pgoutput import PG_EPOCH
from cdc.values import SESSION_OPTIONS
from warehouse.changes import format_lsn

_XLOG_HEADER = struct.Struct(">QQq")
_KEEPALIVE = struct.Struct(">Qqb")
_STATUS = struct.Struct(">cQQQqb")
_PG_EPOCH_UNIX_S = PG_EPOCH.timestamp()
_STATUS_EVERY_S = 10.0


class CopyMessage(Enum):
    """First byte of a message inside the replication COPY stream."""

    XLOG_DATA = b"w"
    KEEPALIVE = b"k"


class ReplicationSession:
    """A ``replication=database`` connection streaming ``slot`` from a given LSN."""

    def __init__(self, dsn: str, slot: str, publication: str) -> None:
        self._dsn, self._slot, self._publication = dsn, slot, publication
        self._conn: pq.abc.PGconn | None = None
        self._received = 0
        self._confirmed = 0
        self._last_status = 0.0

    def start(self, lsn: int) -> None:
        """Open the connection and start streaming transactions that end after ``lsn``;
        ``lsn`` is confirmed right away (the warehouse holds everything up to it)."""
        conninfo = psycopg.conninfo.make_conninfo(
            self._dsn,
            replication="database",
            options=SESSION_OPTIONS,
            application_name="quarry-cdc-stream",
        )
        conn = pq.PGconn.connect(conninfo.encode())
        if conn.status != pq.ConnStatus.OK:
            message = conn.get_error_message().strip()
            conn.finish()
            raise SourceUnavailableError(f"cannot open a replication connection: {message}")
        self._conn = conn
        command = sql.SQL(
            "START_REPLICATION SLOT {} LOGICAL {} (proto_version '1', publication_names {}, "
            "messages 'true')"
        ).format(
            sql.Identifier(self._slot), sql.SQL(format_lsn(lsn)), sql.Literal(self._publication)
        )
        conn.send_query(command.as_bytes(None))
        result = conn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            self._raise_start_error(result)
        conn.nonblocking = 1
        self._received = self._confirmed = lsn
        self.confirm(lsn)

    def _raise_start_error(self, result: pq.abc.PGresult | None) -> None:
        state = None if result is None else result.error_field(pq.DiagnosticField.SQLSTATE)
        message = _text(result.error_message) if result is not None else "no result"
        self.close()
        if state == b"42704":  # undefined_object
            raise SlotDroppedError(
                f"replication slot {self._slot!r} does not exist any more; the warehouse "
                "cannot be brought up to date from it: run a new initial snapshot explicitly "
                "(CdcConfig.resnapshot, `quarry cdc follow --resnapshot`)",
                slot=self._slot,
            )
        if state == b"55006":  # object_in_use
            raise CdcError(
                f"replication slot {self._slot!r} is in use by another process; is a second "
                "follower running?",
                retryable=True,
                slot=self._slot,
            )
        raise SourceUnavailableError(f"START_REPLICATION failed: {message}", slot=self._slot)

    def read(self, timeout_s: float) -> list[tuple[int, bytes]]:
        """pgoutput messages that arrived within ``timeout_s`` seconds (at least one if any
        arrived), each with the WAL position it starts at. Answers keepalives."""
        conn = self._connection()
        deadline = time.monotonic() + timeout_s
        out: list[tuple[int, bytes]] = []
        try:
            while True:
                size, data = conn.get_copy_data(1)
                if size > 0:
                    self._handle(data, out)
                    continue
                if size < 0:
                    self._raise_stream_end()
                if out or time.monotonic() >= deadline:
                    break
                select.select([conn.socket], [], [], min(deadline - time.monotonic(), 1.0))
                conn.consume_input()
            self._status_if_due()
        except psycopg.OperationalError as error:
            self.close()
            raise SourceUnavailableError(f"lost the replication stream: {error}") from error
        return out

    def _handle(self, data: memoryview, out: list[tuple[int, bytes]]) -> None:
        kind = bytes(data[:1])
        if kind == CopyMessage.XLOG_DATA.value:
            start, end, _ = _XLOG_HEADER.unpack_from(data, 1)
            self._received = max(self._received, end)
            out.append((start, bytes(data[1 + _XLOG_HEADER.size :])))
        elif kind == CopyMessage.KEEPALIVE.value:
            end, _, reply = _KEEPALIVE.unpack_from(data, 1)
            self._received = max(self._received, end)
            if reply:
                self._send_status()

    def confirm(self, lsn: int) -> None:
        """Report ``lsn`` as flushed: the slot may release WAL up to it."""
        self._confirmed = max(self._confirmed, lsn)
        try:
            self._send_status()
        except psycopg.OperationalError as error:
            self.close()
            raise SourceUnavailableError(f"lost the replication stream: {error}") from error

    def _status_if_due(self) -> None:
        if time.monotonic() - self._last_status >= _STATUS_EVERY_S:
            self._send_status()

    def _send_status(self) -> None:
        conn = self._connection()
        now_us = int((time.time() - _PG_EPOCH_UNIX_S) * 1_000_000)
        message = _STATUS.pack(b"r", self._received, self._confirmed, self._confirmed, now_us, 0)
        if conn.put_copy_data(message) != 1 or conn.flush() < 0:
            self._raise_stream_end()
        self._last_status = time.monotonic()

    def _raise_stream_end(self) -> None:
        conn = self._connection()
        message = conn.get_error_message().strip() or "the server ended the replication stream"
        self.close()
        raise SourceUnavailableError(f"lost the replication stream: {message}", slot=self._slot)

    def _connection(self) -> pq.abc.PGconn:
        if self._conn is None:
            raise SourceUnavailableError("the replication stream is not open", slot=self._slot)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.finish()
            self._conn = None


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode(errors="replace").strip()
