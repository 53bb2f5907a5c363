"""Garbage collection of the service's manifest folder.

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
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psycopg

from curation.registry import pulls_of

#: Age (seconds since the last write) before an unregistered or partial file is deleted.
GRACE_S = 3600.0
_MANIFEST_FILE = re.compile(r"^([0-9a-f]{64})\.arrow$")
_PARTIAL_FILE = re.compile(r"^\.tmp-\d+-[0-9a-f]+$")
_STAMP_SUFFIX = ".verified.json"  # the loader's verification stamp beside a node's copy

Reason = Literal["unregistered", "retired", "partial"]


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
    conn: psycopg.Connection[Any], folder: Path, *, dry_run: bool, grace_s: float = GRACE_S
) -> GcReport:
    """Delete (or with ``dry_run`` only list) the unreferenced files of ``folder``, the
    service's manifest folder; see the module docstring for what goes and what stays."""
    report = GcReport(dry_run)
    files, partial = _scan(folder)
    registered = _registered(conn, sorted(files))
    cutoff = time.time() - grace_s
    for manifest_id, path in sorted(files.items()):
        if manifest_id not in registered:
            if _mtime(path) < cutoff:
                _delete(report, Collected(manifest_id, str(path), _size(path), "unregistered"))
        elif registered[manifest_id]:
            _collect_retired(conn, report, manifest_id, path)
    for path in partial:
        if _mtime(path) < cutoff:
            _delete(report, Collected(None, str(path), _size(path), "partial"))
    return report


def _scan(folder: Path) -> tuple[dict[str, Path], list[Path]]:
    """The folder's manifest files by ID, and its partial writes (folders are left alone:
    a rebuild works in one)."""
    files: dict[str, Path] = {}
    partial: list[Path] = []
    if not folder.is_dir():
        return files, partial
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False):
            continue
        match = _MANIFEST_FILE.match(entry.name)
        if match is not None:
            files[match.group(1)] = Path(entry.path)
        elif _PARTIAL_FILE.match(entry.name):
            partial.append(Path(entry.path))
    return files, partial


def _registered(conn: psycopg.Connection[Any], ids: list[str]) -> dict[str, bool]:
    """Which of ``ids`` the registry holds, each mapped to whether it is retired."""
    rows = conn.execute(
        "SELECT id, retired_at IS NOT NULL FROM manifests WHERE id = ANY(%s)", (ids,)
    ).fetchall()
    return {str(row[0]): bool(row[1]) for row in rows}


def _collect_retired(
    conn: psycopg.Connection[Any], report: GcReport, manifest_id: str, path: Path
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
        _delete(report, Collected(manifest_id, str(path), _size(path), "retired"))


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


def _delete(report: GcReport, collected: Collected) -> None:
    if not report.dry_run:
        path = Path(collected.path)
        path.unlink(missing_ok=True)
        path.with_name(path.name + _STAMP_SUFFIX).unlink(missing_ok=True)
    report.deleted.append(collected)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()  # gone meanwhile: young, so left alone


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
