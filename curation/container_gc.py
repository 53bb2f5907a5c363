"""Garbage collection of superseded container versions (``quarry episodes gc``).

A reprocess makes a new container version current and keeps the older ones, because a
manifest built before lists them and must still rebuild byte-identical and read them.
Deleted: a superseded version (its file and its ``episode_containers`` row) that no
registered manifest lists, once superseded for longer than :data:`GRACE_S` (a curation
building at that moment may still register a manifest that lists it). Which manifests hold
an episode comes from the lineage in the warehouse
(:func:`curation.registry.manifests_containing`); whether one lists this version, from the
manifest file's ``uri`` column, read where the registry says the file is (the folder or the
S3 prefix of :class:`manifests.objects.ManifestPlace`). A manifest whose file is missing
keeps every version of its episodes, unless it is retired (then nothing reads it again).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from curation.lineage import LineageStore
from curation.registry import get_manifest, manifests_containing
from episodes.versions import ContainerVersion, forget_version, superseded_versions
from manifests.manifest import Manifest
from manifests.objects import ManifestPlace

#: Seconds a version stays after it was superseded, whatever the lineage says.
GRACE_S = 3600.0
#: More manifests than this holding one episode: keep its versions (not worth reading all).
_MAX_MANIFESTS = 10_000


@dataclass(frozen=True)
class VersionKept:
    """A superseded version that stays, and the manifest that lists it (or might)."""

    episode_id: str
    version: int
    uri: str
    manifest_id: str | None
    reason: str


@dataclass
class ContainerGcReport:
    dry_run: bool
    deleted: list[ContainerVersion] = field(default_factory=list)
    kept: list[VersionKept] = field(default_factory=list)

    @property
    def freed_bytes(self) -> int:
        return sum(v.size_bytes for v in self.deleted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "deleted": [asdict(v) for v in self.deleted],
            "kept": [asdict(k) for k in self.kept],
            "freed_bytes": self.freed_bytes,
        }


def collect_containers(
    conn: psycopg.Connection[Any],
    lineage: LineageStore,
    manifests: ManifestPlace,
    *,
    grace_s: float = GRACE_S,
    dry_run: bool = False,
) -> ContainerGcReport:
    """Delete the superseded versions no manifest lists (module docstring)."""
    report = ContainerGcReport(dry_run)
    for version in superseded_versions(conn, grace_s):
        kept = _why_kept(conn, lineage, manifests, version)
        if kept is not None:
            report.kept.append(kept)
            continue
        if not dry_run:
            _delete_file(version.uri)
            forget_version(conn, version)
        report.deleted.append(version)
    return report


def _why_kept(
    conn: psycopg.Connection[Any],
    lineage: LineageStore,
    place: ManifestPlace,
    version: ContainerVersion,
) -> VersionKept | None:
    if not version.uri.startswith("file://"):
        return _kept(version, None, "not in a local object store: delete it there")
    holders = manifests_containing(
        conn, lineage, uuid.UUID(version.episode_id), limit=_MAX_MANIFESTS
    )
    if len(holders) >= _MAX_MANIFESTS:
        return _kept(version, None, "too many manifests hold the episode to read them all")
    for holder in holders:
        entry = get_manifest(conn, holder["id"])
        if not place.exists(entry["uri"]):
            if entry["retired_at"] is None:
                return _kept(version, holder["id"], "manifest file missing")
            continue
        if _lists(place.open_manifest(entry["uri"]), version):
            return _kept(version, holder["id"], "listed by the manifest")
    return None


def _lists(manifest: Manifest, version: ContainerVersion) -> bool:
    return any(
        version.uri in manifest.batch(b).column("uri").to_pylist()
        for b in range(manifest.num_batches)
    )


def _kept(version: ContainerVersion, manifest_id: str | None, reason: str) -> VersionKept:
    return VersionKept(version.episode_id, version.version, version.uri, manifest_id, reason)


def _delete_file(uri: str) -> None:
    Path(uri.removeprefix("file://")).unlink(missing_ok=True)
