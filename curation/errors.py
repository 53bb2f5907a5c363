"""Errors of the curation engine. One base class; the HTTP app answers each with its
``status`` and ``title`` (the problem document), so a job that failed records the same."""

from __future__ import annotations

from typing import Any


class CurationError(Exception):
    """Base of the curation engine's errors; structured context in ``context``; pickles."""

    status: int = 500
    retryable: bool = False
    title: str = "Curation error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))


def _rebuild(cls: type[CurationError], message: str, context: dict[str, Any]) -> CurationError:
    return cls(message, **context)


class NotFoundError(CurationError):
    """A manifest, episode or job that does not exist."""

    title = "Not found"
    status = 404


class BadRequestError(CurationError):
    """A request the engine refuses; the message says why."""

    title = "Bad request"
    status = 400


class WarehouseLagError(CurationError):
    """The warehouse's data is further behind the source than the curation bound allows."""

    title = "Warehouse too far behind"
    status = 409
    retryable = True
