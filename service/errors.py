"""Errors of the control plane. One base class; the CLI and the HTTP app map them in one place."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base of every control-plane error.

    ``status`` is the HTTP status the API answers with; ``exit_code`` what the CLI exits with.
    Structured context travels in ``context`` so that handlers never parse messages.
    """

    status: int = 500
    exit_code: int = 1
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


class StackError(ServiceError):
    """A part of the embedded stack could not start, stop or be reached."""

    title = "Stack unavailable"
    status = 503
    exit_code = 3
    retryable = True


class ConfigError(ServiceError):
    """The settings or the state folder are not usable as given."""

    title = "Bad configuration"
    exit_code = 2


class NotFoundError(ServiceError):
    """A requested object (manifest, episode, ...) does not exist."""

    title = "Not found"
    status = 404
    exit_code = 4


class BadRequestError(ServiceError):
    """The request is malformed or refused; the message says why."""

    title = "Bad request"
    status = 400
    exit_code = 2


class UnauthorizedError(ServiceError):
    """No valid bearer token."""

    title = "Unauthorized"
    status = 401
    exit_code = 5


class ForbiddenError(ServiceError):
    """The token lacks the scope the request needs."""

    title = "Forbidden"
    status = 403
    exit_code = 5
