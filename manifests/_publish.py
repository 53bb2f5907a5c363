"""Atomic publication of content-addressed files: temp file, fsync, rename."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from types import TracebackType
from typing import IO

ID_SUFFIX = ".arrow"


class HashingFile:
    """A write-only binary file that hashes (SHA-256) everything written through it.

    pyarrow wraps it as a Python file, so a manifest is hashed in the same pass that writes it.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._digest = hashlib.sha256()
        self._position = 0
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        self._digest.update(view)
        self._raw.write(view)
        self._position += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        self._raw.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def close(self) -> None:
        # pyarrow closes its sink when the writer closes; the owner closes the raw file.
        self.closed = True

    def hexdigest(self) -> str:
        """Hex SHA-256 of the bytes written so far."""
        return self._digest.hexdigest()


class AtomicFile:
    """A temp file in ``directory`` that becomes ``<name>`` only on :meth:`publish`.

    Used as a context manager: leaving the block without publishing removes the temp file.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.tmp_path = directory / f".tmp-{os.getpid()}-{secrets.token_hex(8)}"
        self._raw: IO[bytes] = self.tmp_path.open("xb")
        self.file = HashingFile(self._raw)

    def publish(self, name: str) -> Path:
        """fsync the data, rename it to ``directory/name`` and fsync the directory.

        If ``name`` already exists (same content ID), the existing file is kept.
        """
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        target = self.directory / name
        self.tmp_path.replace(target)
        fsync_directory(self.directory)
        return target

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._raw.closed:
            self._raw.close()
        self.tmp_path.unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    """fsync a directory so a rename inside it survives a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hash_file(path: Path, block_bytes: int = 8 * 1024 * 1024) -> str:
    """Hex SHA-256 of a file, read in blocks of ``block_bytes`` bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(block_bytes):
            digest.update(block)
    return digest.hexdigest()
