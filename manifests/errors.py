"""Errors raised by the manifests package.

Every error derives from :class:`ManifestError`, carries structured attributes (the manifest
``manifest_id`` and ``path``, the ``column`` where they apply) and a ``retryable`` flag, and
pickles with those attributes intact, because errors cross DataLoader worker processes.
"""

from __future__ import annotations

from typing import Any


class ManifestError(Exception):
    """Base error of the manifests package.

    :param message: what went wrong, in words.
    :param manifest_id: the manifest ID (hex SHA-256) the error concerns, if any.
    :param path: the manifest file the error concerns, if any.
    :param column: the column the error concerns, if any.
    :param retryable: ``True`` when retrying the same call may succeed (e.g. an I/O error).
    """

    retryable_default = False

    def __init__(
        self,
        message: str,
        *,
        manifest_id: str | None = None,
        path: str | None = None,
        column: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.manifest_id = manifest_id
        self.path = path
        self.column = column
        self.retryable = self.retryable_default if retryable is None else retryable

    def __str__(self) -> str:
        where = [
            f"{name}={value}"
            for name, value in (
                ("manifest_id", self.manifest_id),
                ("path", self.path),
                ("column", self.column),
            )
            if value is not None
        ]
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), self.__dict__.copy())


class ManifestSchemaError(ManifestError):
    """A query result cannot become a manifest: a column is missing, mistyped or invalid."""


class ManifestFormatError(ManifestError):
    """A file is not a Quarry manifest, or is of an unsupported format version."""


class ManifestNotFoundError(ManifestError):
    """No manifest with this ID (or at this path) exists."""


class ManifestIdError(ManifestError):
    """A string is not a valid manifest ID (64 lowercase hex digits)."""


class ManifestCorruptError(ManifestError):
    """A manifest file's bytes do not hash to its ID."""


class ManifestIndexError(ManifestError):
    """A global sample number lies outside the manifest's ``[0, num_samples)``."""


class ManifestIOError(ManifestError):
    """Reading or writing a manifest file failed at the operating-system level."""

    retryable_default = True
