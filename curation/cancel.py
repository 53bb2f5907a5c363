"""Cancelling a running curation: a cancel scope per build, and readers that hand each query
to the scope of the thread running it, so that a cancel stops the query inside the engine:

- DuckLake (:class:`InterruptibleReader`): the query's cursor, since DuckDB has no statement
  cancel but ``cursor.interrupt()``;
- ClickHouse (:class:`KillableReader`): each query is tagged (its ``log_comment``) and a
  cancel runs ``KILL QUERY`` on that tag.

An interrupt that reaches a query before it starts is lost, so a cancelled scope keeps
interrupting its queries every :data:`REINTERRUPT_S` seconds until the build ends, and refuses
to start new ones.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

import duckdb
import pyarrow as pa

from curation.errors import CurationError
from warehouse.ducklake.reader import LakeReader
from warehouse.errors import WarehouseError

if TYPE_CHECKING:  # clickhouse-connect loads only where the ClickHouse backend is used
    from warehouse.clickhouse.backend import ClickHouseWarehouse

REINTERRUPT_S = 0.1
_SCOPE: ContextVar[CancelScope | None] = ContextVar("quarry_cancel_scope", default=None)


class CurationCancelledError(CurationError):
    """The curation was cancelled before it finished."""

    title = "Curation cancelled"
    status = 409


class Interruptible(Protocol):
    """A running query that a cancel can stop: a DuckDB cursor, or a tagged ClickHouse query."""

    def interrupt(self) -> None: ...


class CancelScope:
    """The cancellation state of one build. Thread-safe; ``cancel()`` may come from any
    thread, the build runs inside ``with scope.active():``."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._cursors: list[Interruptible] = []
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check(self) -> None:
        """Raise :class:`CurationCancelledError` once the scope is cancelled."""
        if self._cancelled.is_set():
            raise CurationCancelledError("the curation was cancelled")

    def cancel(self) -> None:
        """Stop the build: interrupt its running query now and any it starts later."""
        with self._lock:
            if self._cancelled.is_set():
                return
            self._cancelled.set()
        threading.Thread(
            target=self._keep_interrupting, name="curation-cancel", daemon=True
        ).start()

    def attach(self, cursor: Interruptible) -> None:
        """Track ``cursor`` (called by the readers below for each query); raises
        :class:`CurationCancelledError` once the scope is cancelled."""
        with self._lock:
            self._cursors.append(cursor)
        self.check()

    def close(self) -> None:
        """The build is over (or will never run): stop interrupting, forget the cursors."""
        self._done.set()
        with self._lock:
            self._cursors.clear()

    @contextlib.contextmanager
    def active(self) -> Iterator[CancelScope]:
        """Make this the scope of the queries the current thread runs; closes it after."""
        token = _SCOPE.set(self)
        try:
            yield self
        finally:
            _SCOPE.reset(token)
            self.close()

    def _keep_interrupting(self) -> None:
        while True:
            with self._lock:
                cursors = list(self._cursors)
            for cursor in cursors:
                # a closed cursor has nothing to stop; a failed kill is tried again
                with contextlib.suppress(duckdb.Error, WarehouseError):
                    cursor.interrupt()
            if self._done.wait(REINTERRUPT_S):
                return


class InterruptibleReader(LakeReader):
    """A :class:`LakeReader` whose queries the current :class:`CancelScope` can interrupt.
    Limits, lockdown and errors are the warehouse reader's own."""

    def cursor(self) -> duckdb.DuckDBPyConnection:
        cursor = super().cursor()
        scope = _SCOPE.get()
        if scope is not None:
            try:
                scope.attach(cursor)
            except CurationCancelledError:
                cursor.close()
                raise
        return cursor


class _TaggedQuery:
    """A ClickHouse query by its tag: interrupting it kills it."""

    def __init__(self, warehouse: ClickHouseWarehouse, tag: str) -> None:
        self._warehouse = warehouse
        self._tag = tag

    def interrupt(self) -> None:
        self._warehouse.kill_queries(self._tag)


class KillableReader:
    """The ClickHouse counterpart of :class:`InterruptibleReader`: queries run on the
    warehouse's own reader (its limits and errors), each tagged, so that the current
    :class:`CancelScope` can ``KILL QUERY`` it. A killed query fails with a
    ``QueryError``, which the build reads as the cancel it was."""

    def __init__(self, warehouse: ClickHouseWarehouse) -> None:
        self._warehouse = warehouse

    def query_arrow(
        self,
        sql: str,
        *,
        snapshot_id: int | None = None,
        timeout_s: float | None = None,
        max_rows: int | None = None,
        tables: Mapping[str, pa.Table] | None = None,
    ) -> pa.Table:
        tag: str | None = None
        scope = _SCOPE.get()
        if scope is not None:
            tag = f"quarry-curation-{uuid.uuid4().hex}"
            scope.attach(_TaggedQuery(self._warehouse, tag))
        return self._warehouse.query_arrow(
            sql,
            snapshot_id=snapshot_id,
            timeout_s=timeout_s,
            max_rows=max_rows,
            tables=tables,
            tag=tag,
        )

    def close(self) -> None:
        """Nothing to release: the warehouse (and its readers) belong to the caller."""
