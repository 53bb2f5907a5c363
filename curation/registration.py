"""A built manifest into the registry (its lineage in the warehouse, then its row), and the
registered manifest a curation may reuse instead of building.

A manifest's name, tags and description live here, with its author and creation time, never
in the file: they change neither its bytes nor its ID.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa

from curation.errors import EmptyCurationError
from curation.lineage import lock_key
from manifests.meta import ManifestMeta


@dataclass(frozen=True)
class ManifestAnnotation:
    """What a team says about a manifest: a name, tags and a description (each may be
    empty). Tags are kept sorted and unique."""

    name: str = ""
    tags: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class CurationResult:
    """A built or reused manifest, with the name, tags and description the registry holds
    for it (a reused manifest keeps its own name and description, and gains the tags).
    ``warehouse_lag_s``: seconds the warehouse's data was behind the source when this
    curation pinned its snapshot (``None``: unknown; see :mod:`curation.freshness`);
    ``lag_warning``: why that is past the bound, when the bound warns instead of refusing.
    ``path``: where the file is, a local path or an object's URI (the registry's ``uri``)."""

    manifest_id: str
    rows: int
    samples: int
    size_bytes: int
    snapshot_id: int
    reused: bool
    path: Path | str
    name: str = ""
    tags: tuple[str, ...] = ()
    description: str = ""
    warehouse_lag_s: float | None = None
    lag_warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest_id": self.manifest_id,
            "rows": self.rows,
            "samples": self.samples,
            "size_bytes": self.size_bytes,
            "snapshot_id": self.snapshot_id,
            "reused": self.reused,
            "name": self.name,
            "tags": list(self.tags),
            "description": self.description,
            "warehouse_lag_s": self.warehouse_lag_s,
            "lag_warning": self.lag_warning,
        }


def reuse_manifest(
    conn: psycopg.Connection[Any],
    key: str,
    annotation: ManifestAnnotation,
    snapshot: int,
    allow_empty: bool,
    exists: Callable[[str], bool] = lambda uri: Path(uri).exists(),
) -> CurationResult | None:
    """The registered manifest of reuse key ``key`` whose file is there (one in use before a
    retired one, then the oldest), annotated (see :func:`annotate`); ``None`` when there is
    none (``exists``: whether a row's ``uri`` is there). The rows are locked while their
    files are looked at, so that a garbage collection cannot take a file in between
    (:mod:`curation.gc` locks them too).

    :raises EmptyCurationError: that manifest holds no sample and not ``allow_empty``.
    """
    with conn.transaction():
        rows = conn.execute(
            "SELECT id, rows, samples, size_bytes, snapshot_id, uri FROM manifests "
            "WHERE reuse_key = %s ORDER BY retired_at IS NOT NULL, created_at FOR UPDATE",
            (key,),
        ).fetchall()
        row = next((r for r in rows if exists(r[5])), None)
        if row is None:
            return None
        if row[2] == 0 and not allow_empty:
            raise EmptyCurationError.at(snapshot, None, 0)
        result = CurationResult(row[0], row[1], row[2], row[3], row[4], True, row[5])
        return annotate(conn, result, annotation)


def annotate(
    conn: psycopg.Connection[Any], result: CurationResult, annotation: ManifestAnnotation
) -> CurationResult:
    """Give a registered manifest (whose row the caller holds) ``annotation``'s tags, and its
    name and description where it has none; a retired one comes back (its file is there
    again). Returns ``result`` with what the registry now holds."""
    row = conn.execute(
        "UPDATE manifests SET name = CASE WHEN name = '' THEN %s ELSE name END, "
        "description = CASE WHEN description = '' THEN %s ELSE description END, "
        "tags = ARRAY(SELECT DISTINCT t FROM unnest(tags || %s::text[]) AS t ORDER BY t), "
        "uri = %s, retired_at = NULL WHERE id = %s RETURNING name, tags, description",
        (
            annotation.name,
            annotation.description,
            list(annotation.tags),
            str(result.path),
            result.manifest_id,
        ),
    ).fetchone()
    if row is None:  # the caller holds the row; nothing deletes registry rows
        raise AssertionError(f"manifest {result.manifest_id} left the registry")
    return replace(result, name=row[0], tags=tuple(row[1]), description=row[2])


def register_manifest(
    conn: psycopg.Connection[Any],
    write_lineage: Callable[[str, pa.Table], None],
    result: CurationResult,
    meta: ManifestMeta,
    key: str,
    author: str,
    annotation: ManifestAnnotation,
    episodes: pa.Table,
) -> CurationResult:
    """Register a built manifest and its lineage (``episodes``: each episode id and container
    SHA-256 once, :func:`curation.lineage.lineage_rows`): the lineage goes to the warehouse
    first, under the manifest's ID (``write_lineage``: ``Warehouse.append_lineage``), and
    the registry row last, so a crash between them
    leaves lineage that nothing reads until :func:`curation.lineage.collect_lineage` deletes
    it. The same bytes built before, under another reuse key, keep their row and lineage and
    are annotated instead (:func:`annotate`)."""
    tags = sorted(set(annotation.tags))
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(result.manifest_id),))
        held = conn.execute(
            "SELECT 1 FROM manifests WHERE id = %s FOR UPDATE", (result.manifest_id,)
        ).fetchone()
        if held is not None:
            return annotate(conn, result, annotation)
        write_lineage(result.manifest_id, episodes)
        conn.execute(
            "INSERT INTO manifests (id, reuse_key, sql, sample_spec, snapshot_id, cdc_position,"
            " rows, samples, size_bytes, uri, author, name, tags, description) VALUES (%s, %s,"
            " %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                result.manifest_id,
                key,
                meta.sql,
                json.dumps(meta.sample_spec),
                result.snapshot_id,
                position_text(meta.cdc_position),
                result.rows,
                result.samples,
                result.size_bytes,
                str(result.path),
                author,
                annotation.name,
                tags,
                annotation.description,
            ),
        )
    return replace(
        result, name=annotation.name, tags=tuple(tags), description=annotation.description
    )


def position_text(position: dict[str, Any] | str | None) -> str:
    """A manifest's CDC position as the registry's text column holds it: the object's JSON
    text with sorted keys (the text a version-1 file records); empty when there is none."""
    if position is None:
        return ""
    return position if isinstance(position, str) else json.dumps(position, sort_keys=True)


def position_object(text: str) -> dict[str, Any] | None:
    """The registry's (or a version-1 file's) position text as the object it holds; ``None``
    when empty. Text that is no JSON object (only a hand-written row holds such) comes back
    as ``{"text": ...}``."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"text": text}
