"""Cancelling a running curation: a cancel scope per build, and a reader that hands each
query's cursor to the scope of the thread running it, so that a cancel interrupts the query
inside the engine (DuckDB has no statement cancel but ``cursor.interrupt()``).

An interrupt that reaches a cursor before its query starts is lost, so a cancelled scope keeps
interrupting its cursors every :data:`REINTERRUPT_S` seconds until the build ends, and refuses
to hand out new ones.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar

import duckdb

from service.errors import ServiceError
from warehouse.reader import LakeReader

REINTERRUPT_S = 0.1
_SCOPE: ContextVar[CancelScope | None] = ContextVar("quarry_cancel_scope", default=None)


class CurationCancelledError(ServiceError):
    """The curation was cancelled before it finished."""

    title = "Curation cancelled"
    status = 409


class CancelScope:
    """The cancellation state of one build. Thread-safe; ``cancel()`` may come from any
    thread, the build runs inside ``with scope.active():``."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
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

    def attach(self, cursor: duckdb.DuckDBPyConnection) -> None:
        """Track ``cursor`` (called by :class:`InterruptibleReader` for each query)."""
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
                with contextlib.suppress(duckdb.Error):  # a closed cursor has nothing to stop
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
