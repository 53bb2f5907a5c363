"""The pipeline's one error base (structured, ``retryable``, pickles across processes)."""

from __future__ import annotations

from typing import Any

import psycopg

#: OSErrors that the same call would meet again: a missing, misplaced or forbidden file.
_TERMINAL_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
#: Database errors another attempt may not meet: the server unreachable or the connection
#: broken, a serialization failure or deadlock, and a unique violation (a second worker
#: registering the same recording at the same moment: the retry finds its row, and
#: registering is idempotent).
_RETRYABLE_DB_ERRORS = (
    psycopg.OperationalError,
    psycopg.errors.TransactionRollback,
    psycopg.errors.UniqueViolation,
)


class PipelineError(Exception):
    """A run that cannot start, or a step that failed; ``context`` names the episode,
    recording and step."""

    retryable_default = False

    def __init__(self, message: str, *, retryable: bool | None = None, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = self.retryable_default if retryable is None else retryable
        self.context = context

    def __str__(self) -> str:
        named = ", ".join(f"{k}={v}" for k, v in self.context.items() if v is not None)
        return f"{self.message} ({named})" if named else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.retryable, self.context))


def _rebuild(
    cls: type[PipelineError], message: str, retryable: bool, context: dict[str, Any]
) -> PipelineError:
    return cls(message, retryable=retryable, **context)


class ProfileError(PipelineError):
    """The profile cannot run on an episode (e.g. no source recording to reprocess from)."""


def is_retryable(error: BaseException) -> bool:
    """Whether a step that raised ``error`` may succeed when tried again: an error that says
    so (``retryable`` of :class:`PipelineError` and ``episodes``' errors), the operational
    database unreachable, its connection broken, a serialization failure, deadlock or
    concurrent insert of the same row (:data:`_RETRYABLE_DB_ERRORS`), an
    ``OSError`` or timeout reading the landing area or S3 other than a missing or forbidden
    file. Anything else (a damaged recording: ``SourceError``, ``ContainerError``) is
    terminal."""
    flag = getattr(error, "retryable", None)
    if isinstance(flag, bool):
        return flag
    if isinstance(error, _RETRYABLE_DB_ERRORS):
        return True
    if isinstance(error, _TERMINAL_OS_ERRORS):
        return False
    return isinstance(error, OSError | TimeoutError)
