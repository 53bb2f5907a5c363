"""Errors raised by the loader package.

Every error derives from :class:`LoaderError`, carries structured attributes (the object
``uri``, the ``episode_id`` and the cache ``key`` where they apply) and a ``retryable`` flag,
and pickles with those attributes intact, because errors cross DataLoader worker processes.
"""

from __future__ import annotations

from typing import Any


class LoaderError(Exception):
    """Base error of the loader package.

    :param message: what went wrong, in words.
    :param uri: the object-store URI the error concerns, if any.
    :param episode_id: the episode the error concerns, if any.
    :param key: the cache key (hex SHA-256 of the object) the error concerns, if any.
    :param retryable: ``True`` when retrying the same call may succeed (e.g. a network read).
    """

    retryable_default = False
    message = "loader error"
    """Each instance sets its own; this class-level value makes torch's ``ExceptionWrapper``
    re-raise a worker's error as ``cls(message=...)`` without binding it to a local name: the
    other branch keeps the error in a frame of its own traceback, a reference cycle that leaves
    the DataLoader iterator to the garbage collector, whose finalizers close the workers' index
    queues before the iterator's ``__del__`` can send them the stop signal (a 2 x 5 s hang at
    shutdown). See ``docs/loader.md``, "Worker errors and shutdown"."""

    def __init__(
        self,
        message: str,
        *,
        uri: str | None = None,
        episode_id: str | None = None,
        key: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.uri = uri
        self.episode_id = episode_id
        self.key = key
        self.retryable = self.retryable_default if retryable is None else retryable

    def __str__(self) -> str:
        where = [
            f"{name}={value}"
            for name, value in (
                ("episode_id", self.episode_id),
                ("uri", self.uri),
                ("key", self.key),
            )
            if value is not None
        ]
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), self.__dict__.copy())


class ObjectStoreError(LoaderError):
    """Reading from the object store failed (network, permissions); usually worth retrying."""

    retryable_default = True


class ObjectNotFoundError(ObjectStoreError):
    """No object at the URI."""

    retryable_default = False


class ChecksumError(LoaderError):
    """An object's bytes do not hash to the SHA-256 the manifest records."""


class CacheError(LoaderError):
    """The node-local cache is unusable (its index, its folder, a lock that timed out)."""

    retryable_default = True


class CacheFullError(CacheError):
    """The cache disk is full even after evicting every object no live process needs."""

    retryable_default = False


class ManifestDeliveryError(LoaderError):
    """A manifest could not be made local on the node: no source is configured, the service
    refused or could not be reached, the bytes do not hash to the ID, or local rank 0 did not
    publish the copy in time. ``key`` is the manifest ID, ``uri`` the URL or file concerned.

    :param status: the HTTP status the service answered, if it answered.
    """

    def __init__(
        self,
        message: str,
        *,
        uri: str | None = None,
        key: str | None = None,
        status: int | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, uri=uri, key=key, retryable=retryable)
        self.status = status


class BadEpisodeError(LoaderError):
    """An episode could not be read into a sample (corrupt container, missing topic, ...)."""


class SamplerStateError(LoaderError):
    """A sampler state dict does not fit this sampler (other seed, manifest or epoch)."""
