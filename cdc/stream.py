"""Whole transactions from the slot, read and folded on a thread of their own.

A reader thread holds the replication session: it decodes pgoutput as the server streams it
and folds each transaction, at its commit, into the pending batch. The follower takes the
pending batch whenever it is ready to apply the next one, so decoding the next batch overlaps
with the warehouse applying the current one (DuckDB releases the GIL while it works).
Transactions ending at or before the start position are dropped: the warehouse's position is
authoritative, the slot's only a lower bound. The slot is confirmed only up to what the
follower says the warehouse has committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

from cdc.batch import PendingBatch
from cdc.config import CdcConfig
from cdc.errors import SourceUnavailableError
from cdc.pgoutput import Relation, decode_message
from cdc.replication import ReplicationSession
from cdc.slot import SlotState, slot_state
from cdc.source import Connection, connect, table_key, warehouse_table
from cdc.transactions import TransactionAssembler
from warehouse.base import Warehouse
from warehouse.changes import ColumnSpec, TableSpec
from warehouse.rows import Layout

HEARTBEAT_PREFIX = "quarry_heartbeat"
_READ_TIMEOUT_S = 0.05
_RELEASE_WAIT_S = 5.0
_T = TypeVar("_T")
log = logging.getLogger(__name__)

#: Called (on the reader thread) with a table new to the warehouse, before its first row.
NewTableHook = Callable[[TableSpec, Relation], None]


class ChangeStream:
    """The follower's view of the source: the streamed slot, plus one ordinary session for
    heartbeats, slot state and catalog lookups."""

    def __init__(self, dsn: str, config: CdcConfig, warehouse: Warehouse) -> None:
        self._dsn, self._config, self._warehouse = dsn, config, warehouse
        self._conn: Connection | None = None
        self._types: dict[tuple[int, int], str] = {}
        self._reader: _Reader | None = None
        self.on_new_table: NewTableHook | None = None

    def start(self, after_lsn: int) -> None:
        """Stream transactions ending after ``after_lsn`` (which is confirmed to the slot)."""
        self.stop()
        session = ReplicationSession(self._dsn, self._config.slot, self._config.publication)
        session.start(after_lsn)
        assembler = TransactionAssembler(self._layout)
        self._reader = _Reader(session, assembler, after_lsn, self._config.max_changes_per_batch)

    def take(self, timeout_s: float) -> PendingBatch | None:
        """The pending batch once it holds a whole transaction (waits up to ``timeout_s``
        seconds); re-raises what stopped the reader."""
        if self._reader is None:
            raise SourceUnavailableError("the change stream is not started")
        return self._reader.take(timeout_s)

    def confirm(self, lsn: int) -> None:
        """The warehouse holds everything up to ``lsn``: the slot may release it."""
        if self._reader is not None:
            self._reader.confirm(lsn)

    def stop(self) -> None:
        """Stop streaming; waits (up to a few seconds) until the server has released the
        slot, so that a restart or ``pg_drop_replication_slot`` does not find it busy."""
        if self._reader is None:
            return
        self._reader.stop()
        self._reader = None
        deadline = time.monotonic() + _RELEASE_WAIT_S
        try:
            while time.monotonic() < deadline:
                state = self.state()
                if state is None or not state.active:
                    return
                time.sleep(0.02)
        except SourceUnavailableError:
            return  # the server is gone: nothing holds the slot

    def state(self) -> SlotState | None:
        return self._call(lambda conn: slot_state(conn, self._config.slot))

    def heartbeat(self) -> None:
        """Write a transactional logical message: the stream returns it as an empty
        transaction, whose end the warehouse records and the slot is then confirmed to, so a
        quiet publication does not hold back WAL written by other databases and tables."""
        self._call(
            lambda conn: conn.execute(
                "SELECT pg_logical_emit_message(true, %s, '')", (HEARTBEAT_PREFIX,)
            )
        )

    def _layout(self, relation: Relation) -> Layout:
        """The staging layout of a relation; creates or widens its warehouse table first."""
        spec = self.table_spec(relation)
        known = self._warehouse.mirrored_tables().get(spec.name)
        if self._warehouse.ensure_table(spec):
            log.info("warehouse table %s created or widened", spec.name)
        if known is None and self.on_new_table is not None:
            self.on_new_table(spec, relation)
        key = self._warehouse.mirrored_tables()[spec.name]
        return Layout.of(spec.name, [c.name for c in relation.columns], key)

    def table_spec(self, relation: Relation) -> TableSpec:
        """The warehouse spec of a table as a Relation message describes it; its key is the
        table's primary key or replica identity index (not REPLICA IDENTITY FULL's columns)."""
        columns = tuple(
            ColumnSpec(c.name, self._type_name(c.type_oid, c.type_modifier))
            for c in relation.columns
        )
        key = self._call(lambda conn: table_key(conn, relation.oid))
        if not key:
            key = tuple(c.name for c in relation.columns if c.is_key)
        return TableSpec(warehouse_table(relation.namespace, relation.name), columns, key)

    def _type_name(self, oid: int, modifier: int) -> str:
        if (oid, modifier) not in self._types:
            row = self._call(
                lambda conn: conn.execute(
                    "SELECT format_type(%s, %s)", (oid, modifier if modifier >= 0 else None)
                ).fetchone()
            )
            self._types[(oid, modifier)] = str(row[0]) if row else "text"
        return self._types[(oid, modifier)]

    def _call(self, step: Callable[[Connection], _T]) -> _T:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self._dsn)
            return step(self._conn)
        except psycopg.OperationalError as error:
            self._close_control()
            raise SourceUnavailableError(f"lost the source database: {error}") from error

    def _close_control(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self.stop()
        self._close_control()


class _Reader:
    """The thread that owns the replication session and fills the pending batch."""

    def __init__(
        self,
        session: ReplicationSession,
        assembler: TransactionAssembler,
        after_lsn: int,
        max_changes: int,
    ) -> None:
        self._session, self._assembler = session, assembler
        self._after, self._max_changes = after_lsn, max_changes
        self._cond = threading.Condition()
        self._pending = PendingBatch()
        self._error: BaseException | None = None
        self._confirm_to = after_lsn
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="quarry-cdc-reader", daemon=True)
        self._thread.start()

    def take(self, timeout_s: float) -> PendingBatch | None:
        with self._cond:
            if not self._pending and self._error is None:
                self._cond.wait(timeout_s)
            if self._error is not None:
                raise self._error
            if not self._pending:
                return None
            batch, self._pending = self._pending, PendingBatch()
            self._cond.notify_all()
            return batch

    def confirm(self, lsn: int) -> None:
        with self._cond:
            self._confirm_to = max(self._confirm_to, lsn)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(30)
        self._session.close()

    def _run(self) -> None:
        try:
            confirmed = self._after
            while True:
                with self._cond:
                    while self._pending.changes >= self._max_changes and not self._stopping:
                        self._cond.wait(1.0)  # backpressure: a full batch waits to be taken
                    if self._stopping:
                        return
                    confirm_to = self._confirm_to
                if confirm_to > confirmed:
                    self._session.confirm(confirm_to)
                    confirmed = confirm_to
                self._read_some()
        except BaseException as error:
            with self._cond:
                self._error = error
                self._cond.notify_all()

    def _read_some(self) -> None:
        for _, data in self._session.read(_READ_TIMEOUT_S):
            tx = self._assembler.feed(decode_message(data))
            if tx is not None and tx.end_lsn > self._after:
                with self._cond:
                    self._pending.add(tx)
                    self._cond.notify_all()
