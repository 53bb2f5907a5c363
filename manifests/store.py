"""A folder of manifests addressed by ID: where one lies, and a verified put."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ._publish import ID_SUFFIX, AtomicFile
from .build import ManifestInfo
from .errors import (
    ManifestCorruptError,
    ManifestIdError,
    ManifestIOError,
)
from .manifest import Manifest, is_manifest_id, open_manifest

_COPY_BLOCK = 8 * 1024 * 1024


class ManifestStore:
    """Manifests under one folder, each at ``<root>/<id>.arrow``; IDs are SHA-256 digests.

    Every write goes through a temp file, fsync and rename, so concurrent writers of the same
    manifest (same bytes, same ID) and concurrent readers are safe.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, manifest_id: str) -> Path:
        """Where manifest ``manifest_id`` lies (whether or not it exists).

        :raises ManifestIdError: ``manifest_id`` is not 64 lowercase hex digits.
        """
        if not is_manifest_id(manifest_id):
            raise ManifestIdError("not a manifest ID", manifest_id=manifest_id[:80])
        return self.root / f"{manifest_id}{ID_SUFFIX}"

    def contains(self, manifest_id: str) -> bool:
        """Whether manifest ``manifest_id`` is in the store."""
        return self.path(manifest_id).is_file()

    def exists(self, location: str) -> bool:
        """Whether the manifest file at ``location`` (a registry row's ``uri``) is there."""
        return Path(location).is_file()

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """Where a build writes: the folder itself (a build publishes atomically into it)."""
        yield self.root

    def publish(self, info: ManifestInfo) -> str:
        """The location of a manifest built into :meth:`staging` (it is there already)."""
        return str(info.path)

    def open_manifest(self, location: str) -> Manifest:
        """Memory-map the manifest file at ``location``."""
        return open_manifest(location)

    def put(
        self, source: str | os.PathLike[str] | bytes | BinaryIO, expected_id: str | None = None
    ) -> ManifestInfo:
        """Copy a manifest (a file path, bytes, or a readable binary stream) into the store.

        The copy is hashed as it is written; it is checked to be a readable manifest and,
        when ``expected_id`` is given, to hash to it, before it is published.

        :raises ManifestCorruptError: the bytes do not hash to ``expected_id``.
        :raises ManifestFormatError: the bytes are not a manifest.
        """
        if expected_id is not None:
            self.path(expected_id)
        try:
            with AtomicFile(self.root) as atomic:
                _copy_into(source, atomic)
                digest = atomic.file.hexdigest()
                if expected_id is not None and digest != expected_id:
                    raise ManifestCorruptError(
                        f"received bytes hash to {digest}", manifest_id=expected_id
                    )
                atomic.file.flush()
                opened = open_manifest(atomic.tmp_path)
                rows, samples, size = opened.num_rows, opened.num_samples, atomic.file.tell()
                del opened
                path = atomic.publish(digest + ID_SUFFIX)
        except OSError as exc:
            raise ManifestIOError(f"cannot store manifest: {exc}", path=str(self.root)) from exc
        return ManifestInfo(digest, path, rows, samples, size)


def _copy_into(source: str | os.PathLike[str] | bytes | BinaryIO, atomic: AtomicFile) -> None:
    if isinstance(source, bytes):
        atomic.file.write(source)
    elif isinstance(source, str | os.PathLike):
        with Path(source).open("rb") as handle:
            shutil.copyfileobj(handle, atomic.file, _COPY_BLOCK)
    else:
        shutil.copyfileobj(source, atomic.file, _COPY_BLOCK)
