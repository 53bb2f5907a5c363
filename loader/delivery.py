"""Manifest delivery to a training node: one download per node, every rank maps the copy."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from manifests import Manifest, is_manifest_id, open_manifest

from .cache import Lease, NodeCache, ObjectRef
from .errors import CacheFullError, LoaderError


def fetch_manifest(cache: NodeCache, uri: str, manifest_id: str) -> tuple[Manifest, Lease]:
    """Make manifest ``manifest_id`` (served at ``uri``) local and memory-map it.

    Every rank of a node calls this; the cache's per-object lock makes one of them download
    the file (hashed as it is written, checked against the ID, renamed into place) while the
    others wait and then map the same file, so the node holds one copy of its pages. The
    returned lease pins the file against eviction: keep it for the life of the job.

    ``uri`` is any URI the cache's object store reads: ``file://``, ``s3://``, or the
    service's ``http(s)://.../v1/manifests/<id>/arrow`` (headers such as the token go in
    ``StoreConfig.options["http"]``).

    :raises LoaderError: ``manifest_id`` is malformed.
    :raises ChecksumError: the bytes served do not hash to ``manifest_id``.
    :raises CacheFullError: the cache has no room for the manifest.
    """
    _check_id(manifest_id, uri)
    ref = ObjectRef(uri=uri, sha256=manifest_id, size=cache.store.size(uri))
    lease = cache.acquire(ref)
    if lease.path is None:
        message = f"no room in the cache for the {ref.size}-byte manifest; it must be local"
        raise CacheFullError(message, uri=uri, key=manifest_id)
    return _mapped(lease)


def cached_manifest(
    cache: NodeCache, manifest_id: str, download: Callable[[Path], None]
) -> tuple[Manifest, Lease]:
    """Manifest ``manifest_id`` from the cache; if it is not there, ``download(path)`` first.

    ``download`` writes the manifest's bytes to ``path`` (a temp file in the cache folder),
    e.g. from the service's ``GET /v1/manifests/{id}/arrow``; the bytes then enter the cache
    like any object (checked against the ID, published atomically) and the temp file goes.
    A manifest already cached costs no download, so a command that needs it can be run again.

    :raises LoaderError: ``manifest_id`` is malformed.
    :raises ChecksumError: the downloaded bytes do not hash to ``manifest_id``.
    :raises CacheFullError: the cache has no room for the manifest.
    """
    _check_id(manifest_id, "")
    lease = cache.lookup(manifest_id)
    if lease is not None:
        return _mapped(lease)
    part = cache.root / "tmp" / f"{manifest_id}.download-{os.getpid()}"
    try:
        download(part)
        return fetch_manifest(cache, part.as_uri(), manifest_id)
    finally:
        part.unlink(missing_ok=True)


def _check_id(manifest_id: str, uri: str) -> None:
    if not is_manifest_id(manifest_id):
        raise LoaderError("not a manifest ID", uri=uri or None, key=manifest_id[:80])


def _mapped(lease: Lease) -> tuple[Manifest, Lease]:
    assert lease.path is not None
    try:
        return open_manifest(lease.path), lease
    except BaseException:
        lease.release()
        raise
