"""Garbage collection of the service's manifest folder (or its S3 prefix).

Deleted: manifest files (``<id>.arrow``) the registry has no row for, partial writes
(``.tmp-*``, what a killed build or download leaves), both once older than :data:`GRACE_S`
(a build publishes its file a moment before it registers it), and the files of retired
manifests. Never deleted: the file of a manifest anyone pulled (downloaded from the service,
as every trainer does; see ``manifest_pulls``) or that a label points at (a tag or a name),
retired or not; nor any registered manifest that is not retired. A retired manifest's row
stays, with its lineage.

Each retired manifest is deleted under its registry row's lock, checked again there: a pull
(whose row's foreign key takes a key-share lock on it), an edit or a curation reusing it
either goes first, and is seen, or waits until the file is gone.

In S3 (``manifests.url``) the same rules hold for the prefix's ``<id>.arrow`` objects, aged by
their last write; there are no partial writes to collect (an upload is visible whole or not
at all).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psycopg

from curation.registry import pulls_of
from manifests.objects import ManifestPlace, ObjectManifestStore
from manifests.store import ManifestStore

#: Age (seconds since the last write) before an unregistered or partial file is deleted.
GRACE_S = 3600.0
_MANIFEST_FILE = re.compile(r"^([0-9a-f]{64})\.arrow$")
_PARTIAL_FILE = re.compile(r"^\.tmp-\d+-[0-9a-f]+$")
_STAMP_SUFFIX = ".verified.json"  # the loader's verification stamp beside a node's copy

Reason = Literal["unregistered", "retired", "partial"]


@dataclass(frozen=True)
class _File:
    """A file (or object) found: where, its size in bytes and its last write (Unix s)."""

    location: str
    size_bytes: int
    modified: float


@dataclass(frozen=True)
class Collected:
    """A file deleted (or, in a dry run, that would be), ``size_bytes`` bytes."""

    manifest_id: str | None
    path: str
    size_bytes: int
    reason: Reason


@dataclass(frozen=True)
class Kept:
    """A retired manifest whose file stays, and why."""

    manifest_id: str
    reason: Literal["pulled", "tagged", "named"]
    detail: str


@dataclass
class GcReport:
    dry_run: bool
    deleted: list[Collected] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)

    @property
    def freed_bytes(self) -> int:
        return sum(c.size_bytes for c in self.deleted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "deleted": [asdict(c) for c in self.deleted],
            "kept": [asdict(k) for k in self.kept],
            "freed_bytes": self.freed_bytes,
        }


def collect_manifests(
    conn: psycopg.Connection[Any],
    manifests: Path | ManifestPlace,
    *,
    dry_run: bool,
    grace_s: float = GRACE_S,
) -> GcReport:
    """Delete (or with ``dry_run`` only list) the unreferenced files of ``manifests``, the
    service's manifest folder or store; see the module docstring for what goes and what
    stays."""
    place = ManifestStore(manifests) if isinstance(manifests, Path) else manifests
    report = GcReport(dry_run)
    files, partial = _scan(place)
    registered = _registered(conn, sorted(files))
    cutoff = time.time() - grace_s
    remove = _remover(place)
    for manifest_id, found in sorted(files.items()):
        if manifest_id not in registered:
            if found.modified < cutoff:
                collected = Collected(manifest_id, found.location, found.size_bytes, "unregistered")
                _delete(report, collected, remove)
        elif registered[manifest_id]:
            _collect_retired(conn, report, manifest_id, found, remove)
    for found in partial:
        if found.modified < cutoff:
            _delete(report, Collected(None, found.location, found.size_bytes, "partial"), remove)
    return report


def _scan(place: ManifestPlace) -> tuple[dict[str, _File], list[_File]]:
    """The manifest files by ID, and the partial writes (folders are left alone: a rebuild
    works in one)."""
    if isinstance(place, ObjectManifestStore):
        listed = place.list()
        return {
            o.manifest_id: _File(place.uri(o.manifest_id), o.size_bytes, o.modified) for o in listed
        }, []
    files: dict[str, _File] = {}
    partial: list[_File] = []
    if not place.root.is_dir():
        return files, partial
    for entry in sorted(os.scandir(place.root), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False):
            continue
        match = _MANIFEST_FILE.match(entry.name)
        if match is not None:
            files[match.group(1)] = _local(Path(entry.path))
        elif _PARTIAL_FILE.match(entry.name):
            partial.append(_local(Path(entry.path)))
    return files, partial


def _registered(conn: psycopg.Connection[Any], ids: list[str]) -> dict[str, bool]:
    """Which of ``ids`` the registry holds, each mapped to whether it is retired."""
    rows = conn.execute(
        "SELECT id, retired_at IS NOT NULL FROM manifests WHERE id = ANY(%s)", (ids,)
    ).fetchall()
    return {str(row[0]): bool(row[1]) for row in rows}


def _collect_retired(
    conn: psycopg.Connection[Any],
    report: GcReport,
    manifest_id: str,
    found: _File,
    remove: Callable[[str], None],
) -> None:
    """Delete a retired manifest's file unless it is pulled, tagged or named, under its row's
    lock (a dry run locks nothing)."""
    with conn.transaction():
        lock = "" if report.dry_run else " FOR UPDATE"
        row = conn.execute(
            f"SELECT retired_at IS NOT NULL, tags, name FROM manifests WHERE id = %s{lock}",
            (manifest_id,),
        ).fetchone()
        if row is None or not row[0]:  # brought back meanwhile
            return
        kept = _why_kept(conn, manifest_id, list(row[1]), str(row[2]))
        if kept is not None:
            report.kept.append(kept)
            return
        collected = Collected(manifest_id, found.location, found.size_bytes, "retired")
        _delete(report, collected, remove)


def _why_kept(
    conn: psycopg.Connection[Any], manifest_id: str, tags: list[str], name: str
) -> Kept | None:
    pulls = pulls_of(conn, manifest_id)
    last = pulls["last"]
    if last is not None:
        run = f" for run {last['run']}" if last["run"] else ""
        times = "once" if pulls["count"] == 1 else f"{pulls['count']} times"
        detail = (
            f"pulled {times}, last at {last['pulled_at'].isoformat()} by {last['principal']}{run}"
        )
        return Kept(manifest_id, "pulled", detail)
    if tags:
        return Kept(manifest_id, "tagged", "tagged " + ", ".join(tags))
    if name:
        return Kept(manifest_id, "named", f"named {name!r}")
    return None


def _delete(report: GcReport, collected: Collected, remove: Callable[[str], None]) -> None:
    if not report.dry_run:
        remove(collected.path)
    report.deleted.append(collected)


def _remover(place: ManifestPlace) -> Callable[[str], None]:
    """How a collected file goes: an object deleted, or a file and its verification stamp."""
    if isinstance(place, ObjectManifestStore):
        return place.delete

    def unlink(location: str) -> None:
        path = Path(location)
        path.unlink(missing_ok=True)
        path.with_name(path.name + _STAMP_SUFFIX).unlink(missing_ok=True)

    return unlink


def _local(path: Path) -> _File:
    """A local file as found (gone meanwhile: young and empty, so left alone)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return _File(str(path), 0, time.time())
    return _File(str(path), stat.st_size, stat.st_mtime)
