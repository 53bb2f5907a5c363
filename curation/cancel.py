"""Cancelling a running curation: one cancel scope per build.

Each query of a build carries the scope's tag (``Warehouse.query_arrow(..., tag=...)``), and
a cancel calls ``Warehouse.cancel(tag)``, which stops the tagged query inside the engine (a
DuckDB cursor's interrupt, ClickHouse's ``KILL QUERY``). A cancel that reaches a query before
it starts is lost, so a cancelled scope cancels its tag again every :data:`REINTERRUPT_S`
seconds until the build ends, and refuses to start new queries.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator

from curation.errors import CurationError
from warehouse.errors import WarehouseError

REINTERRUPT_S = 0.1
#: What stops the running queries of a tag: ``Warehouse.cancel``.
Canceller = Callable[[str], None]


class CurationCancelledError(CurationError):
    """The curation was cancelled before it finished."""

    title = "Curation cancelled"
    status = 409


class CancelScope:
    """The cancellation state of one build. Thread-safe; ``cancel()`` may come from any
    thread, the build runs inside ``with scope.active():``."""

    def __init__(self) -> None:
        self.tag = f"quarry-curation-{uuid.uuid4().hex}"
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._cancellers: list[Canceller] = []
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check(self) -> None:
        """Raise :class:`CurationCancelledError` once the scope is cancelled."""
        if self._cancelled.is_set():
            raise CurationCancelledError("the curation was cancelled")

    def watch(self, cancel: Canceller) -> str:
        """Have ``cancel(tag)`` called when the scope is cancelled; returns the tag the
        build's queries carry. Raises :class:`CurationCancelledError` once cancelled."""
        with self._lock:
            if cancel not in self._cancellers:  # bound methods of one warehouse compare equal
                self._cancellers.append(cancel)
        self.check()
        return self.tag

    def cancel(self) -> None:
        """Stop the build: cancel its running query now and any it starts later."""
        with self._lock:
            if self._cancelled.is_set():
                return
            self._cancelled.set()
        threading.Thread(target=self._keep_cancelling, name="curation-cancel", daemon=True).start()

    def close(self) -> None:
        """The build is over (or will never run): stop cancelling, forget the cancellers."""
        self._done.set()
        with self._lock:
            self._cancellers.clear()

    @contextlib.contextmanager
    def active(self) -> Iterator[CancelScope]:
        """Run a build in this scope; the scope is closed when the build ends."""
        try:
            yield self
        finally:
            self.close()

    def _keep_cancelling(self) -> None:
        while True:
            with self._lock:
                cancellers = list(self._cancellers)
            for cancel in cancellers:
                with contextlib.suppress(WarehouseError):  # a failed kill is tried again
                    cancel(self.tag)
            if self._done.wait(REINTERRUPT_S):
                return
