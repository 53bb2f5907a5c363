"""A manifest onto a node: manifest ID -> one verified local file every process of the node maps.

The one way a node gets a manifest (the trainer's ranks, ``quarry cache warm``, the CLI's
``manifests diff``). The node's manifest folder (``<state>/manifests``) is a
:class:`manifests.ManifestStore`: the leader (local rank 0, or a lone command) downloads
``GET {service_url}/v1/manifests/{id}/arrow`` under a file lock into it (the bytes are hashed as
they are written and published by rename only when they hash to the ID) and writes a
verification stamp; the other local ranks wait for the stamped copy. A copy already in the folder
is reused; it is hashed again when its stamp does not match the file (or always, with
``reverify``). A ``path`` in the source is used as it is, with no service.

The service records every download as a pull (so that it never garbage-collects a manifest a
trainer uses); the request names the node (``User-Agent``) and, when given, the training run
(``X-Quarry-Run``).
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import httpx
from filelock import FileLock, Timeout

from manifests import ManifestError, ManifestStore, is_manifest_id, open_manifest

from .config import ManifestConfig
from .errors import ManifestDeliveryError

log = logging.getLogger(__name__)

_POLL_S = 0.05
_LOCK_SUFFIX = ".lock"
_STAMP_SUFFIX = ".verified.json"
_MAX_BACKOFF_S = 30.0
RUN_HEADER = "X-Quarry-Run"


def deliver_manifest(
    source: ManifestConfig, folder: Path, *, leader: bool = True, run: str | None = None
) -> Path:
    """The local manifest file this process memory-maps, fetched or waited for as needed.

    :param source: the manifest's ID and service, or a local ``path``.
    :param folder: the node's manifest folder (one per node; every process on it shares it).
    :param leader: this process may download (local rank 0, or a command run alone); the
        others wait up to ``source.wait_s`` seconds for the leader's verified copy.
    :param run: the training run the manifest is for, recorded by the service with the pull.
    :raises ManifestDeliveryError: no source is configured, the download fails, the bytes do
        not hash to the ID, or the leader did not publish the copy within ``wait_s``.
    """
    if source.path is not None:
        if not source.path.is_file():
            raise ManifestDeliveryError("no manifest file", uri=str(source.path))
        return source.path
    manifest_id = _manifest_id(source)
    store = ManifestStore(folder)
    if leader:
        return _ensure_local_copy(source, store, manifest_id, run)
    return _wait_for_copy(store, manifest_id, source.wait_s)


def _manifest_id(source: ManifestConfig) -> str:
    if source.id is None:
        raise ManifestDeliveryError(
            "set manifest.id (--manifest) or manifest.path (--manifest-path)"
        )
    if not is_manifest_id(source.id):
        raise ManifestDeliveryError(
            "not a manifest ID (64 lowercase hex digits)", key=source.id[:80]
        )
    return source.id


def _ensure_local_copy(
    source: ManifestConfig, store: ManifestStore, manifest_id: str, run: str | None
) -> Path:
    """Under the node's lock: reuse a verified copy, or download and publish one."""
    store.root.mkdir(parents=True, exist_ok=True)
    path = store.path(manifest_id)
    lock = FileLock(str(path) + _LOCK_SUFFIX, timeout=source.wait_s)
    try:
        with lock:
            if path.is_file() and _copy_is_good(path, source.reverify):
                return path
            _download_manifest(source, store, manifest_id, run)
            _write_stamp(path)
    except Timeout as exc:
        raise ManifestDeliveryError(
            f"another process held the manifest lock for {source.wait_s} s",
            key=manifest_id,
            retryable=True,
        ) from exc
    return path


def _copy_is_good(path: Path, reverify: bool) -> bool:
    if not reverify and stamp_matches(path):
        return True
    try:
        open_manifest(path).verify()
    except ManifestError as exc:
        log.warning("local manifest copy is bad, fetching it again: %s", exc)
        path.unlink(missing_ok=True)
        return False
    _write_stamp(path)
    return True


def _wait_for_copy(store: ManifestStore, manifest_id: str, wait_s: float) -> Path:
    """Wait until the leader has published a verified copy; return its path."""
    path = store.path(manifest_id)
    deadline = time.monotonic() + wait_s
    while not (path.is_file() and stamp_matches(path)):
        if time.monotonic() > deadline:
            raise ManifestDeliveryError(
                f"local rank 0 did not publish the manifest within {wait_s} s",
                uri=str(path),
                key=manifest_id,
                retryable=True,
            )
        time.sleep(_POLL_S)
    return path


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + _STAMP_SUFFIX)


def _file_identity(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino}


def _write_stamp(path: Path) -> None:
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


def _download_manifest(
    source: ManifestConfig, store: ManifestStore, manifest_id: str, run: str | None
) -> None:
    """Download the manifest into ``store``, retrying retryable failures with backoff."""
    if source.service_url is None or source.token_file is None:
        raise ManifestDeliveryError(
            "fetching a manifest needs a service URL and a token file "
            "(manifest.service_url, manifest.token_file)",
            key=manifest_id,
        )
    headers = {
        "Authorization": f"Bearer {_read_token(source.token_file)}",
        "User-Agent": f"quarry-loader (node {socket.gethostname()})",
    }
    if run:
        headers[RUN_HEADER] = run
    url = f"{source.service_url.rstrip('/')}/v1/manifests/{manifest_id}/arrow"
    for attempt in range(1, source.attempts + 1):
        try:
            _download_once(url, headers, source.http_timeout_s, store, manifest_id)
            return
        except ManifestDeliveryError as exc:
            if not exc.retryable or attempt == source.attempts:
                raise
            log.warning("manifest download failed (attempt %d): %s", attempt, exc)
            time.sleep(min(2.0**attempt, _MAX_BACKOFF_S))


def _read_token(token_file: Path) -> str:
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise ManifestDeliveryError(f"cannot read token file: {exc}", uri=str(token_file)) from exc
    if not token:
        raise ManifestDeliveryError("token file is empty", uri=str(token_file))
    return token


def _download_once(
    url: str, headers: dict[str, str], timeout_s: float, store: ManifestStore, manifest_id: str
) -> None:
    try:
        with httpx.stream("GET", url, headers=headers, timeout=timeout_s) as response:
            _check_response(response, url, manifest_id)
            body = cast(BinaryIO, _StreamReader(response.iter_bytes()))
            store.put(body, expected_id=manifest_id)
    except httpx.HTTPError as exc:
        raise ManifestDeliveryError(
            f"cannot reach the service: {exc}", uri=url, key=manifest_id, retryable=True
        ) from exc
    except ManifestError as exc:
        raise ManifestDeliveryError(
            f"downloaded manifest rejected: {exc}",
            uri=url,
            key=manifest_id,
            retryable=exc.retryable,
        ) from exc


def _check_response(response: httpx.Response, url: str, manifest_id: str) -> None:
    status = response.status_code
    if status != httpx.codes.OK:
        response.read()
        raise ManifestDeliveryError(
            f"GET manifest answered {status}: {response.text[:300]}",
            uri=url,
            key=manifest_id,
            status=status,
            retryable=status >= 500 or status == httpx.codes.TOO_MANY_REQUESTS,
        )
    etag = response.headers.get("ETag", "").removeprefix("W/").strip('"')
    if etag and etag != manifest_id:
        raise ManifestDeliveryError(f"service sent ETag {etag!r}", uri=url, key=manifest_id)


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
