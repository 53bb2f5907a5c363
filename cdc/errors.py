"""Errors of the CDC package.

Every error derives from :class:`CdcError`: a message that says what to do, structured
context as keyword attributes (``slot``, ``lsn``, ``table``...), a ``retryable`` flag (the
follower backs off and retries those), and instances that pickle with all of it intact.
"""

from __future__ import annotations

from typing import Any


class CdcError(Exception):
    """Base of every CDC error.

    :param message: what went wrong and, where known, how to fix it.
    :param retryable: ``True`` when the same step may succeed later; defaults to the class's.
    :param context: structured attributes, also reachable as ``error.context[name]``.
    """

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.retryable, self.context))


def _rebuild(
    cls: type[CdcError], message: str, retryable: bool, context: dict[str, Any]
) -> CdcError:
    return cls(message, retryable=retryable, **context)


class PreflightError(CdcError):
    """The source database is not set up for logical replication the way Quarry needs."""


class SlotDroppedError(CdcError):
    """The replication slot the warehouse's position belongs to no longer exists."""


class DecodeError(CdcError):
    """A pgoutput message or a column value could not be decoded."""


class SourceUnavailableError(CdcError):
    """The source database cannot be reached now."""

    retryable = True


class EventError(CdcError):
    """A change event (Debezium's envelope) is malformed; ``index`` is its position in the
    request (0 for a single event) and ``field`` the path of the offending field."""

    def __init__(self, message: str, *, index: int, field: str, **context: Any) -> None:
        super().__init__(message, index=index, field=field, **context)
        self.index, self.field = index, field

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_event, (self.message, self.context))


def _rebuild_event(message: str, context: dict[str, Any]) -> EventError:
    return EventError(message, **context)


class SourceConflictError(CdcError):
    """The warehouse is fed by another source (the built-in follower's slot, or another
    Debezium connector); mixing them would mix two LSN histories."""
