"""Object-store access through fsspec URIs: ``file://`` (default), ``s3://``, ``alluxiofs://``.

A URI without a scheme is a local path. Filesystem instances are made lazily per process
(fsspec's async filesystems such as s3fs do not survive a fork), and a store pickles as its
configuration only, so it can be handed to DataLoader workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, cast

import fsspec
from fsspec.registry import known_implementations
from fsspec.spec import AbstractFileSystem
from fsspec.utils import get_protocol

from .config import StoreConfig
from .errors import ObjectNotFoundError, ObjectStoreError

ALLUXIO = "alluxiofs"
"""The scheme of the Alluxio cluster cache: the ``alluxiofs`` package's filesystem, which
fsspec does not know by itself; it is registered here on first use (the package is optional)."""
_ALLUXIO_CLASS = "alluxiofs.AlluxioFileSystem"
_ALLUXIO_MISSING = "alluxiofs:// URIs need the alluxiofs package: pip install alluxiofs"


class ObjectStore:
    """Reads objects, whole or by byte range, from any fsspec URI.

    :param config: credentials and options; ``StoreConfig()`` reads local files only.
    """

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig()
        self._pid = os.getpid()
        self._filesystems: dict[str, AbstractFileSystem] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    def storage_options(self, protocol: str) -> dict[str, Any]:
        """fsspec keyword arguments for ``protocol``, from the configuration."""
        options: dict[str, Any] = {}
        config = self.config
        if protocol in ("s3", "s3a"):
            if config.s3_endpoint_url:
                options["endpoint_url"] = config.s3_endpoint_url
            if config.s3_key:
                options["key"] = config.s3_key
            if config.s3_secret:
                options["secret"] = config.s3_secret.get_secret_value()
            if config.s3_region:
                options["client_kwargs"] = {"region_name": config.s3_region}
            if config.s3_anon:
                options["anon"] = True
        options.update(config.options.get(protocol, {}))
        return options

    def filesystem(self, uri: str) -> tuple[AbstractFileSystem, str]:
        """The filesystem serving ``uri`` (one per protocol per process) and the path in it."""
        if os.getpid() != self._pid:
            self._pid, self._filesystems = os.getpid(), {}
        protocol = get_protocol(uri)
        fs = self._filesystems.get(protocol)
        if fs is None:
            fs = self._make_filesystem(protocol, uri)
            self._filesystems[protocol] = fs
        return fs, cast(str, fs._strip_protocol(uri))

    def _make_filesystem(self, protocol: str, uri: str) -> AbstractFileSystem:
        if protocol == ALLUXIO and ALLUXIO not in known_implementations:
            fsspec.register_implementation(ALLUXIO, _ALLUXIO_CLASS, errtxt=_ALLUXIO_MISSING)
        options = self.storage_options(protocol)
        try:
            return fsspec.filesystem(protocol, skip_instance_cache=True, **options)
        except (ImportError, ValueError) as exc:  # unknown scheme, or its package is missing
            message = f"cannot read {protocol}:// URIs: {exc}"
            raise ObjectStoreError(message, uri=uri, retryable=False) from exc

    def size(self, uri: str) -> int:
        """Object size, bytes."""
        fs, path = self.filesystem(uri)
        with _translated(uri):
            return int(fs.size(path))

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """``length`` bytes from byte ``start`` (fewer at the end of the object)."""
        if start < 0 or length < 0:
            raise ObjectStoreError(f"bad byte range start={start} length={length}", uri=uri)
        if length == 0:
            return b""
        fs, path = self.filesystem(uri)
        with _translated(uri):
            return bytes(fs.cat_file(path, start=start, end=start + length))

    def read_all(self, uri: str) -> bytes:
        """The whole object."""
        fs, path = self.filesystem(uri)
        with _translated(uri):
            return bytes(fs.cat_file(path))

    def iter_blocks(
        self, uri: str, start: int = 0, block_bytes: int | None = None
    ) -> Iterator[bytes]:
        """The object from byte ``start`` on, in blocks of ``block_bytes`` (a download)."""
        block = block_bytes or self.config.block_bytes
        fs, path = self.filesystem(uri)
        with _translated(uri), fs.open(path, "rb", block_size=block, cache_type="none") as handle:
            if start:
                handle.seek(start)
            while data := handle.read(block):
                yield bytes(data)

    def open(self, uri: str) -> BinaryIO:
        """A seekable reader over ``uri`` that streams with bounded read-ahead.

        Remote objects are read in blocks of ``StoreConfig.block_bytes`` through fsspec's
        ``readahead`` cache, so memory stays at about one block per open object.
        """
        fs, path = self.filesystem(uri)
        with _translated(uri):
            handle = fs.open(path, "rb", block_size=self.config.block_bytes, cache_type="readahead")
        return cast(BinaryIO, handle)


@contextmanager
def _translated(uri: str) -> Iterator[None]:
    """Maps fsspec and OS errors of a read to loader errors (not-found vs retryable)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise ObjectNotFoundError("no such object", uri=uri) from exc
    except PermissionError as exc:
        raise ObjectStoreError(f"access denied: {exc}", uri=uri, retryable=False) from exc
    except OSError as exc:
        raise ObjectStoreError(f"read failed: {exc}", uri=uri) from exc
