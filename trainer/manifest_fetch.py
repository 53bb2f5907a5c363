"""The run's manifest on this node: fetched once per node, verified against its ID.

Local rank 0 downloads ``GET {service_url}/v1/manifests/{id}/arrow`` under a file lock into the
node's manifest folder (the manifests package hashes the bytes as they are written and publishes
by rename only when they hash to the ID); the other local ranks wait for the verified copy. A
copy already on the node is reused; it is hashed again when its verification stamp does not match
the file (or always, with ``reverify``). Every rank then memory-maps the same local file.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import httpx
from filelock import FileLock, Timeout

from manifests import ManifestError, ManifestStore, is_manifest_id, open_manifest

from .config import ManifestSection
from .errors import ManifestFetchError
from .world import World

log = logging.getLogger(__name__)

_POLL_S = 0.05
_LOCK_SUFFIX = ".lock"
_STAMP_SUFFIX = ".verified.json"


def resolve_manifest(source: ManifestSection, store_dir: Path, world: World) -> Path:
    """The local manifest file this rank memory-maps, fetched or waited for as needed.

    :raises ManifestFetchError: no source is configured, the download fails, the bytes do not
        hash to the ID, or local rank 0 did not publish the copy within ``wait_s``.
    """
    if source.path is not None:
        if not source.path.is_file():
            raise ManifestFetchError("no manifest file", path=str(source.path))
        return source.path
    manifest_id = _manifest_id(source)
    store = ManifestStore(store_dir)
    if world.is_node_leader:
        return ensure_local_copy(source, store, manifest_id)
    return wait_for_copy(store, manifest_id, source.wait_s)


def _manifest_id(source: ManifestSection) -> str:
    if source.id is None:
        raise ManifestFetchError("set manifest.id (--manifest) or manifest.path (--manifest-path)")
    if not is_manifest_id(source.id):
        raise ManifestFetchError(
            "not a manifest ID (64 lowercase hex digits)", manifest_id=source.id
        )
    return source.id


def ensure_local_copy(source: ManifestSection, store: ManifestStore, manifest_id: str) -> Path:
    """Under the node's lock: reuse a verified copy, or download and publish one."""
    store.root.mkdir(parents=True, exist_ok=True)
    path = store.path(manifest_id)
    lock = FileLock(str(path) + _LOCK_SUFFIX, timeout=source.wait_s)
    try:
        with lock:
            if path.is_file() and _copy_is_good(path, manifest_id, source.reverify):
                return path
            download_manifest(source, store, manifest_id)
            write_stamp(path)
    except Timeout as exc:
        raise ManifestFetchError(
            f"another process held the manifest lock for {source.wait_s} s",
            manifest_id=manifest_id,
            retryable=True,
        ) from exc
    return path


def _copy_is_good(path: Path, manifest_id: str, reverify: bool) -> bool:
    if not reverify and stamp_matches(path):
        return True
    try:
        open_manifest(path).verify()
    except ManifestError as exc:
        log.warning("local manifest copy is bad, fetching it again: %s", exc)
        path.unlink(missing_ok=True)
        return False
    write_stamp(path)
    return True


def wait_for_copy(store: ManifestStore, manifest_id: str, wait_s: float) -> Path:
    """Wait until local rank 0 has published a verified copy; return its path."""
    path = store.path(manifest_id)
    deadline = time.monotonic() + wait_s
    while not (path.is_file() and stamp_matches(path)):
        if time.monotonic() > deadline:
            raise ManifestFetchError(
                f"local rank 0 did not publish the manifest within {wait_s} s",
                manifest_id=manifest_id,
                path=str(path),
                retryable=True,
            )
        time.sleep(_POLL_S)
    return path


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + _STAMP_SUFFIX)


def _file_identity(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino}


def write_stamp(path: Path) -> None:
    """Record that ``path`` (as it is now: size, mtime, inode) hashed to its ID."""
    stamp = _stamp_path(path)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
    tmp.write_text(json.dumps(_file_identity(path)))
    tmp.replace(stamp)


def stamp_matches(path: Path) -> bool:
    """Whether ``path`` carries a verification stamp that matches the file as it is now."""
    try:
        recorded = json.loads(_stamp_path(path).read_text())
        return bool(recorded == _file_identity(path))
    except (OSError, ValueError):
        return False


def download_manifest(source: ManifestSection, store: ManifestStore, manifest_id: str) -> None:
    """Download the manifest into ``store``, retrying retryable failures with backoff."""
    if source.service_url is None or source.token_file is None:
        raise ManifestFetchError(
            "fetching a manifest needs manifest.service_url and manifest.token_file",
            manifest_id=manifest_id,
        )
    token = _read_token(source.token_file)
    url = f"{source.service_url.rstrip('/')}/v1/manifests/{manifest_id}/arrow"
    for attempt in range(1, source.attempts + 1):
        try:
            _download_once(url, token, source.http_timeout_s, store, manifest_id)
            return
        except ManifestFetchError as exc:
            if not exc.retryable or attempt == source.attempts:
                raise
            log.warning("manifest download failed (attempt %d): %s", attempt, exc)
            time.sleep(min(2.0**attempt, 30.0))


def _read_token(token_file: Path) -> str:
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise ManifestFetchError(f"cannot read token file: {exc}", path=str(token_file)) from exc
    if not token:
        raise ManifestFetchError("token file is empty", path=str(token_file))
    return token


def _download_once(
    url: str, token: str, timeout_s: float, store: ManifestStore, manifest_id: str
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.stream("GET", url, headers=headers, timeout=timeout_s) as response:
            _check_response(response, manifest_id)
            body = cast(BinaryIO, _StreamReader(response.iter_bytes()))
            store.put(body, expected_id=manifest_id)
    except httpx.HTTPError as exc:
        raise ManifestFetchError(
            f"cannot reach the service: {exc}", manifest_id=manifest_id, retryable=True
        ) from exc
    except ManifestError as exc:
        raise ManifestFetchError(
            f"downloaded manifest rejected: {exc}", manifest_id=manifest_id, retryable=exc.retryable
        ) from exc


def _check_response(response: httpx.Response, manifest_id: str) -> None:
    status = response.status_code
    if status != httpx.codes.OK:
        response.read()
        detail = response.text[:300]
        raise ManifestFetchError(
            f"GET manifest answered {status}: {detail}",
            manifest_id=manifest_id,
            retryable=status >= 500 or status == httpx.codes.TOO_MANY_REQUESTS,
        )
    etag = response.headers.get("ETag", "").removeprefix("W/").strip('"')
    if etag and etag != manifest_id:
        raise ManifestFetchError(f"service sent ETag {etag!r}", manifest_id=manifest_id)


class _StreamReader(io.RawIOBase):
    """A readable binary file over an iterator of byte blocks (an HTTP body)."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            block = next(self._blocks, None)
            if block is None:
                return 0
            self._pending = block
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
