"""Errors of the command line and the embedded stack. One base class; ``quarry/cli.py``
turns each into one line and its ``exit_code``."""

from __future__ import annotations

from typing import Any


class QuarryError(Exception):
    """Base of the command line's errors; structured context in ``context``; pickles."""

    exit_code: int = 1
    retryable: bool = False

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))


def _rebuild(cls: type[QuarryError], message: str, context: dict[str, Any]) -> QuarryError:
    return cls(message, **context)


class StackError(QuarryError):
    """A part of the embedded stack could not start, stop or be reached."""

    exit_code = 3
    retryable = True


class ConfigError(QuarryError):
    """The settings or the state folder are not usable as given."""

    exit_code = 2


class BadInputError(QuarryError):
    """An argument or a request the command (or the service) refused; the message says why."""

    exit_code = 2


class NotFoundError(QuarryError):
    """A manifest, episode, token or job that does not exist."""

    exit_code = 4


class AuthError(QuarryError):
    """The service refused the token (missing, revoked, or without the scope)."""

    exit_code = 5
