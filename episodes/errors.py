"""Errors raised by the episodes package.

Every error derives from :class:`EpisodeError`, carries structured attributes (the container
``file``, the ``topic`` and the byte ``offset`` where they apply) and a ``retryable`` flag, and
pickles with those attributes intact, because errors cross DataLoader worker processes.
"""

from __future__ import annotations

from typing import Any


class EpisodeError(Exception):
    """Base error of the episodes package.

    :param message: what went wrong, in words.
    :param file: the container (path or URI) the error concerns, if any.
    :param topic: the topic the error concerns, if any.
    :param offset: byte offset in the container where the problem was found, if known.
    :param retryable: ``True`` when retrying the same call may succeed (e.g. a network read).
    """

    retryable_default = False

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        topic: str | None = None,
        offset: int | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.topic = topic
        self.offset = offset
        self.retryable = self.retryable_default if retryable is None else retryable

    def __str__(self) -> str:
        where = [
            f"{name}={value}"
            for name, value in (("file", self.file), ("topic", self.topic), ("offset", self.offset))
            if value is not None
        ]
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), self.__dict__.copy())


class SpecError(EpisodeError):
    """A sample spec, or its JSON form, is invalid."""


class ContainerError(EpisodeError):
    """A container is truncated, corrupt, or not an MCAP file."""


class ChecksumError(ContainerError):
    """A container's bytes do not match their recorded SHA-256 or chunk CRC."""


class TopicError(EpisodeError):
    """A required topic is missing from a container."""


class SchemaError(EpisodeError):
    """A topic's schema or message encoding is not the one expected."""


class DecodeError(EpisodeError):
    """A message or a video frame could not be decoded."""


class RangeError(EpisodeError):
    """A time (an anchor or a slice) lies outside the episode."""


class SourceError(EpisodeError):
    """A container could not be opened or read (I/O); usually worth retrying."""

    retryable_default = True


class InputError(EpisodeError):
    """A foreign recording or its mapping cannot be ingested as given."""
