"""Manifests in an object store (S3, through fsspec's s3fs): ``<url>/<id>.arrow``.

A service whose manifests are here keeps none on its local disk, so any replica serves any
manifest. A build is written to a local scratch folder (a temp folder, removed after) and
published by one PUT: S3 makes an object visible whole or not at all, and the PUT is
conditional (``If-None-Match: *``), so an existing ID is never overwritten (a second writer
of the same ID, whose bytes are the same, finds it there and keeps it). Reads are ranged:
opening a manifest reads its footer, a download streams its bytes in blocks.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import fsspec
from fsspec.spec import AbstractFileSystem

from ._publish import ID_SUFFIX
from .build import ManifestInfo
from .errors import ManifestIdError, ManifestIOError, ManifestNotFoundError
from .manifest import Manifest, is_manifest_id
from .store import ManifestStore

#: Bytes per ranged read of a manifest (open and download).
BLOCK_BYTES = 8 * 1024 * 1024
_URL = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?$")
_NAME = re.compile(r"^([0-9a-f]{64})\.arrow$")


@dataclass(frozen=True)
class StoredObject:
    """A manifest object as listed: its ID, size in bytes and last write (Unix seconds)."""

    manifest_id: str
    size_bytes: int
    modified: float


class ObjectManifestStore:
    """Manifests under ``url`` (``s3://bucket/prefix``), reached with fsspec
    ``storage_options`` (endpoint, keys, region); see the module docstring.

    :raises ManifestIOError: ``url`` is not an ``s3://bucket[/prefix]`` URL.
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        if not _URL.match(url):
            raise ManifestIOError("not an s3://bucket[/prefix] URL", path=url[:200])
        self.url = url.rstrip("/")
        self._options = dict(storage_options or {})
        self._fs: AbstractFileSystem | None = None

    @property
    def fs(self) -> AbstractFileSystem:
        if self._fs is None:
            self._fs = fsspec.filesystem("s3", skip_instance_cache=True, **self._options)
        return self._fs

    def uri(self, manifest_id: str) -> str:
        """Where manifest ``manifest_id`` lies (whether or not it exists)."""
        if not is_manifest_id(manifest_id):
            raise ManifestIdError("not a manifest ID", manifest_id=manifest_id[:80])
        return f"{self.url}/{manifest_id}{ID_SUFFIX}"

    def owns(self, location: str) -> bool:
        """Whether ``location`` is a manifest object of this store."""
        name = location.removeprefix(self.url + "/")
        return location.startswith(self.url + "/") and bool(_NAME.match(name))

    def exists(self, location: str) -> bool:
        """Whether the manifest object at ``location`` (one of this store's) is there."""
        if not self.owns(location):
            return False
        with _translated(location):
            return bool(self.fs.exists(location))

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """A local scratch folder for one build, removed afterwards."""
        with tempfile.TemporaryDirectory(prefix="quarry-manifest-") as folder:
            yield Path(folder)

    def publish(self, info: ManifestInfo) -> str:
        """Upload the built manifest ``info`` (a local file) as one object; returns its URI.
        An object already there under the ID is kept (same ID, same bytes)."""
        uri = self.uri(info.manifest_id)
        with _translated(uri):
            with suppress(FileExistsError):  # published by another build of the same bytes
                self.fs.put_file(str(info.path), uri, mode="create")
            size = int(self.fs.size(uri))
        if size != info.size_bytes:
            raise ManifestIOError(
                f"the stored object holds {size} bytes, not {info.size_bytes}",
                manifest_id=info.manifest_id,
                path=uri,
            )
        return uri

    def size(self, location: str) -> int:
        """Bytes of the object at ``location``."""
        with _translated(location):
            return int(self.fs.size(self._own(location)))

    def open(self, location: str) -> BinaryIO:
        """A seekable reader of the object, by ranged reads of :data:`BLOCK_BYTES`."""
        with _translated(location):
            handle = self.fs.open(
                self._own(location), "rb", block_size=BLOCK_BYTES, cache_type="readahead"
            )
        return cast(BinaryIO, handle)

    def open_manifest(self, location: str) -> Manifest:
        """The manifest at ``location``, read by ranges (its footer now, batches on use)."""
        return Manifest(location, self.open(location))

    def iter_bytes(self, location: str, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of the object, in blocks of :data:`BLOCK_BYTES`."""
        with self.open(location) as handle:
            handle.seek(start)
            left = end - start
            while left > 0:
                with _translated(location):
                    block = handle.read(min(BLOCK_BYTES, left))
                if not block:
                    raise ManifestIOError("the object ended early", path=location)
                left -= len(block)
                yield bytes(block)

    def list(self) -> list[StoredObject]:
        """Every manifest object of the store (other keys under the prefix are left out)."""
        with _translated(self.url):
            try:
                entries = self.fs.ls(self.url, detail=True, refresh=True)
            except FileNotFoundError:
                return []
        found = []
        for entry in entries:
            match = _NAME.match(str(entry["name"]).rsplit("/", 1)[-1])
            if match is not None and entry.get("type") == "file":
                modified = entry.get("LastModified")
                stamp = modified.timestamp() if modified is not None else 0.0
                found.append(StoredObject(match.group(1), int(entry["size"]), stamp))
        return sorted(found, key=lambda o: o.manifest_id)

    def delete(self, location: str) -> None:
        """Remove the object at ``location`` (gone already: nothing to do)."""
        with _translated(location), suppress(FileNotFoundError):
            self.fs.rm_file(self._own(location))

    def _own(self, location: str) -> str:
        if not self.owns(location):
            raise ManifestNotFoundError("not a manifest object of this store", path=location)
        return location


@contextmanager
def _translated(location: str) -> Iterator[None]:
    """Maps the object store's errors to manifest errors (not found vs retryable I/O)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise ManifestNotFoundError("no manifest object", path=location) from exc
    except PermissionError as exc:
        raise ManifestIOError(f"access denied: {exc}", path=location, retryable=False) from exc
    except OSError as exc:
        raise ManifestIOError(f"object store: {exc}", path=location) from exc


#: Where a service keeps its manifests: a local folder (the default) or an object store.
ManifestPlace = ManifestStore | ObjectManifestStore
