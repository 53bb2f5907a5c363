"""Errors of the HTTP app. One base class; ``service/app.py`` answers every one of them as a
problem document, with the error's ``status`` and ``title``."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base of the HTTP app's errors.

    ``status`` is the HTTP status the API answers with; ``title`` the problem's title.
    Structured context travels in ``context`` so that handlers never parse messages.
    """

    status: int = 500
    retryable: bool = False
    title: str = "Internal error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))


def _rebuild(cls: type[ServiceError], message: str, context: dict[str, Any]) -> ServiceError:
    return cls(message, **context)


class DatabaseUnavailableError(ServiceError):
    """The operational database could not be reached; retry later."""

    title = "Database unavailable"
    status = 503
    retryable = True


class NotFoundError(ServiceError):
    """A requested object (manifest, episode, ...) does not exist."""

    title = "Not found"
    status = 404


class BadRequestError(ServiceError):
    """The request is malformed or refused; the message says why."""

    title = "Bad request"
    status = 400


class UnauthorizedError(ServiceError):
    """No valid bearer token."""

    title = "Unauthorized"
    status = 401


class ForbiddenError(ServiceError):
    """The token lacks the scope the request needs."""

    title = "Forbidden"
    status = 403
