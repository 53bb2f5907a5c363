"""Errors raised by the trainer package, and the exit codes a failing rank reports.

Every error derives from :class:`TrainerError`, carries structured attributes (the preflight
``check`` that failed, the ``rank``, the ``path`` or ``manifest_id`` concerned), a
``retryable`` flag and the process ``exit_code`` it maps to, and pickles with those attributes
intact.
"""

from __future__ import annotations

import enum
from typing import Any


class ExitCode(enum.IntEnum):
    """Exit statuses of ``python -m trainer`` (and of :func:`trainer.launch.launch`).

    Preflight failures have one code per check, so a scheduler can tell a full disk from a
    bad device or a slow network without parsing logs.
    """

    OK = 0
    FAILED = 1
    CONFIG = 64
    MANIFEST = 65
    DATA = 66
    CHECKPOINT = 67
    LAUNCH = 68
    PREFLIGHT_MANIFEST = 70
    PREFLIGHT_CACHE = 71
    PREFLIGHT_DISK = 72
    PREFLIGHT_DEVICE = 73
    PREFLIGHT_COLLECTIVE = 74


class TrainerError(Exception):
    """Base error of the trainer package.

    :param message: what went wrong, in words.
    :param check: the preflight check that failed, if any.
    :param rank: the global rank that raised the error, if known.
    :param path: the file or folder concerned, if any.
    :param manifest_id: the manifest concerned, if any.
    :param retryable: ``True`` when retrying (e.g. a restart of the worker) may succeed.
    """

    retryable_default = False
    exit_code_default = ExitCode.FAILED

    def __init__(
        self,
        message: str,
        *,
        check: str | None = None,
        rank: int | None = None,
        path: str | None = None,
        manifest_id: str | None = None,
        retryable: bool | None = None,
        exit_code: ExitCode | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.check = check
        self.rank = rank
        self.path = path
        self.manifest_id = manifest_id
        self.retryable = self.retryable_default if retryable is None else retryable
        self.exit_code = self.exit_code_default if exit_code is None else exit_code

    def __str__(self) -> str:
        where = [
            f"{name}={value}"
            for name, value in (
                ("check", self.check),
                ("rank", self.rank),
                ("path", self.path),
                ("manifest_id", self.manifest_id),
            )
            if value is not None
        ]
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, written to the run's failure records."""
        return {
            "error": type(self).__name__,
            "message": self.message,
            "check": self.check,
            "rank": self.rank,
            "path": self.path,
            "manifest_id": self.manifest_id,
            "retryable": self.retryable,
            "exit_code": int(self.exit_code),
        }


class ConfigError(TrainerError):
    """The configuration file, an override or a command-line flag is invalid."""

    exit_code_default = ExitCode.CONFIG


class ManifestFetchError(TrainerError):
    """The manifest could not be fetched from the service or found locally (the loader's
    :class:`~loader.errors.ManifestDeliveryError`, given its exit code at the exit boundary)."""

    exit_code_default = ExitCode.MANIFEST


class DataError(TrainerError):
    """The loader could not produce a batch."""

    exit_code_default = ExitCode.DATA


class CheckpointError(TrainerError):
    """A checkpoint could not be written, committed or loaded."""

    exit_code_default = ExitCode.CHECKPOINT


class LaunchError(TrainerError):
    """torchrun could not be started."""

    exit_code_default = ExitCode.LAUNCH


PREFLIGHT_CODES = {
    "manifest": ExitCode.PREFLIGHT_MANIFEST,
    "cache": ExitCode.PREFLIGHT_CACHE,
    "disk": ExitCode.PREFLIGHT_DISK,
    "device": ExitCode.PREFLIGHT_DEVICE,
    "collective": ExitCode.PREFLIGHT_COLLECTIVE,
}


class PreflightError(TrainerError):
    """A preflight check failed: this node must not join the job.

    The exit code follows the check (see :data:`PREFLIGHT_CODES`).
    """

    def __init__(self, message: str, *, check: str, **kwargs: Any) -> None:
        kwargs.setdefault("exit_code", PREFLIGHT_CODES.get(check, ExitCode.FAILED))
        super().__init__(message, check=check, **kwargs)


def _rebuild(cls: type[TrainerError], state: dict[str, Any]) -> TrainerError:
    """Unpickle an error without calling its constructor (subclasses' signatures differ)."""
    error = cls.__new__(cls)
    Exception.__init__(error, state["message"])
    error.__dict__.update(state)
    return error
