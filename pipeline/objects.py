"""Where a worker's containers and landed sources live when workers run on many machines:
an S3 prefix (``s3://bucket/prefix``) every worker reaches, through fsspec (s3fs), instead of
the state folder's ``objects/``. The layout under the prefix is the local one
(``episodes/<robot>/<episode_id>/<sha256[:16]>.mcap``, ``landing/<sha256>.mcap``), and
writes are content-addressed, so a step redone on another machine lands on the same key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import fsspec

from episodes.errors import ChecksumError, SourceError
from episodes.foreign import file_sha256
from episodes.ingest import write_atomic


def container_key(robot_id: str, episode_id: str, sha256: str) -> str:
    """A container version's key under the prefix (the local layout's)."""
    return f"episodes/{robot_id}/{episode_id}/{sha256[:16]}.mcap"


def landing_key(sha256: str) -> str:
    """A landed source recording's key under the prefix (the local layout's)."""
    return f"landing/{sha256}.mcap"


def put(url: str, data: bytes, options: dict[str, Any]) -> None:
    """Write ``data`` at ``url`` unless an object of that size lies there already (its key
    names its content: the same bytes)."""
    fs, path = fsspec.core.url_to_fs(url, **options)
    if fs.exists(path) and fs.size(path) == len(data):
        return
    fs.pipe_file(path, data)


def put_file(url: str, path: Path, options: dict[str, Any]) -> None:
    """Upload the file ``path`` to ``url`` unless an object of its size lies there already."""
    fs, key = fsspec.core.url_to_fs(url, **options)
    if fs.exists(key) and fs.size(key) == path.stat().st_size:
        return
    fs.put_file(str(path), key)


def read(uri: str, options: dict[str, Any]) -> bytes:
    """The bytes of ``uri`` (``file://``, a plain path or ``s3://``)."""
    if not uri.startswith("s3://"):
        return Path(uri.removeprefix("file://")).read_bytes()
    fs, path = fsspec.core.url_to_fs(uri, **options)
    try:
        data: bytes = fs.cat_file(path)
    except FileNotFoundError:
        raise SourceError(
            "object missing from the object store", file=uri, retryable=False
        ) from None
    return data


def local_copy(uri: str, sha256: str, target: Path, options: dict[str, Any]) -> Path:
    """A local file of ``uri`` checked against ``sha256``: the file itself for a local URI,
    else a copy at ``target`` (kept while it matches, so a redone step reads it again)."""
    if not uri.startswith("s3://"):
        path = Path(uri.removeprefix("file://"))
        if not path.is_file():
            raise SourceError(
                "source recording or container missing", file=str(path), retryable=False
            )
    else:
        path = target
        if not (path.is_file() and file_sha256(path) == sha256):
            data = read(uri, options)
            if hashlib.sha256(data).hexdigest() != sha256:
                raise ChecksumError("object does not match its SHA-256", file=uri)
            write_atomic(path, data)
    if file_sha256(path) != sha256:
        raise ChecksumError("source recording does not match its SHA-256", file=str(path))
    return path
