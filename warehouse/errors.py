"""Errors of the warehouse package.

Every error derives from :class:`WarehouseError`: a message, structured context (``table``,
``snapshot_id``, ``sql``... as keyword attributes, never parsed out of the message), a
``retryable`` flag, and instances that pickle with all of it intact.
"""

from __future__ import annotations

from typing import Any


class WarehouseError(Exception):
    """Base of every warehouse error.

    :param message: what went wrong, in words, with what to do about it where known.
    :param retryable: ``True`` when the same call may succeed later (the catalog database is
        restarting, a write conflicted); defaults to the class's ``retryable``.
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
    cls: type[WarehouseError], message: str, retryable: bool, context: dict[str, Any]
) -> WarehouseError:
    return cls(message, retryable=retryable, **context)


class WarehouseUnavailableError(WarehouseError):
    """The warehouse (its catalog database or data path) cannot be reached now."""

    retryable = True


class SchemaError(WarehouseError):
    """A change names a table or column the warehouse cannot hold, or a type it cannot map."""


class QueryError(WarehouseError):
    """A read query failed to bind or run (bad SQL, unknown column, unknown snapshot)."""


class QueryTimeoutError(QueryError):
    """A read query ran past its time limit and was interrupted."""


class RowLimitError(QueryError):
    """A read query returned more rows than the caller allowed."""


# Shorter names the service imports; the same classes.
WarehouseUnavailable = WarehouseUnavailableError
QueryTimeout = QueryTimeoutError
RowLimitExceeded = RowLimitError
