"""Builds a manifest from a curation: guard, pin a snapshot, query, count samples, write,
register. Reuses an existing manifest when the same curation already ran on the same data."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import psycopg
import pyarrow as pa
from sqlglot import exp

from episodes.errors import EpisodeError
from episodes.spec import SampleSpec
from manifests.build import build_manifest
from manifests.meta import ManifestMeta
from service.curation.compose import compose, probe_query
from service.curation.guard import CheckedQuery, CurationRefusedError, check_curation
from warehouse.base import CURATION_VIEWS
from warehouse.changes import Position

CURATION_RELATIONS = frozenset(CURATION_VIEWS)
# Views the manifest query reads besides the curation's own (see compose and _stats_query).
READ_BY_BUILD = frozenset({"episodes", "episode_stats"})


class CurationSource(Protocol):
    """What a curation needs of the warehouse: a pinned snapshot and bounded reads."""

    def current_snapshot(self) -> int: ...

    def data_version(self, views: Collection[str], *, at: int | None = None) -> int: ...

    def position(self, *, at: int | None = None) -> Position | None: ...

    def query_arrow(
        self, sql: str, *, snapshot_id: int | None, timeout_s: float, max_rows: int
    ) -> pa.Table: ...


@dataclass(frozen=True)
class CurationLimits:
    timeout_s: float = 30.0
    max_rows: int = 50_000_000


@dataclass(frozen=True)
class CurationRequest:
    sql: str
    sample_spec: dict[str, Any] | None = None
    author: str = "local"


@dataclass(frozen=True)
class CurationResult:
    manifest_id: str
    rows: int
    samples: int
    size_bytes: int
    snapshot_id: int
    reused: bool
    path: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest_id": self.manifest_id,
            "rows": self.rows,
            "samples": self.samples,
            "size_bytes": self.size_bytes,
            "snapshot_id": self.snapshot_id,
            "reused": self.reused,
        }


def parse_spec(raw: dict[str, Any] | None) -> SampleSpec:
    try:
        return SampleSpec.from_dict(raw if raw is not None else {})
    except EpisodeError as error:
        raise CurationRefusedError(f"bad sample_spec: {error}", reason="sample_spec") from None


def run_curation(
    request: CurationRequest,
    source: CurationSource,
    conn: psycopg.Connection[Any],
    manifest_dir: Path,
    limits: CurationLimits,
) -> CurationResult:
    """Build (or reuse) the manifest of ``request`` and register it in Postgres."""
    checked = check_curation(request.sql, CURATION_RELATIONS)
    spec = parse_spec(request.sample_spec)
    # Query the current snapshot, but name the data by its version: the last snapshot that
    # changed what the query reads. The rows at both are the same; the version is stable.
    current = source.current_snapshot()
    version = source.data_version(checked.relations | READ_BY_BUILD, at=current)
    key = reuse_key(checked, spec, version)
    existing = _find_reusable(conn, key)
    if existing is not None:
        return existing
    table, norm_stats, cameras = _query(checked, spec, source, current, limits)
    if spec.cameras is None and cameras:
        spec = replace(spec, cameras=cameras)
    position = source.position(at=version)
    meta = ManifestMeta(
        sql=checked.normalized,
        sample_spec=spec.to_dict(),
        snapshot_id=version,
        cdc_position=position.to_json() if position is not None else None,
        norm_stats=norm_stats,
    )
    info = build_manifest(table, meta, manifest_dir)
    result = CurationResult(
        info.manifest_id,
        info.num_rows,
        info.num_samples,
        info.size_bytes,
        version,
        False,
        info.path,
    )
    _register(conn, result, meta, key, request.author, table)
    return result


def reuse_key(checked: CheckedQuery, spec: SampleSpec, snapshot: int) -> str:
    """Same normalized query, same sample spec, same data: the same manifest."""
    material = json.dumps([checked.normalized, spec.to_dict(), snapshot], sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def _query(
    checked: CheckedQuery,
    spec: SampleSpec,
    source: CurationSource,
    snapshot: int,
    limits: CurationLimits,
) -> tuple[pa.Table, dict[str, Any], tuple[str, ...]]:
    def run(tree: exp.Expr) -> pa.Table:
        return source.query_arrow(
            tree.sql(dialect="duckdb", comments=False),
            snapshot_id=snapshot,
            timeout_s=limits.timeout_s,
            max_rows=limits.max_rows,
        )

    columns = run(probe_query(checked)).column_names
    composed = compose(checked, columns)
    table = run(composed.tree)
    counts = spec.count_samples(
        table["start_ns"].to_numpy(zero_copy_only=False),
        table["end_ns"].to_numpy(zero_copy_only=False),
    )
    table = table.append_column("num_samples", pa.array(counts, type=pa.int64()))
    table = table.filter(pa.array(counts > 0))
    stats = _norm_stats(run(_stats_query(composed.tree)))
    return table, stats, _cameras(run(_topics_query(composed.tree)))


def _stats_query(composed: exp.Select) -> exp.Select:
    """One aggregate over the per-episode statistics of the curated episodes."""
    ids = exp.select("episode_id").from_(composed.subquery("manifest"))
    where = exp.cast(exp.column("episode_id"), exp.DataType.build("varchar")).isin(query=ids)
    return (
        exp.select(
            "field",
            "dim",
            "sum(count) AS count",
            "sum(sum) AS sum",
            "sum(sum_sq) AS sum_sq",
            "min(min) AS min",
            "max(max) AS max",
        )
        .from_("episode_stats")
        .where(where)
        .group_by("field", "dim")
        .order_by("field", "dim")
    )


def _topics_query(composed: exp.Select) -> exp.Select:
    """The distinct topic lists of the curated episodes (one per camera rig, in practice)."""
    ids = exp.select("episode_id").from_(composed.subquery("manifest"))
    return (
        exp.select("topics")
        .distinct()
        .from_("episodes")
        .where(exp.column("id").isin(query=ids))
        .order_by("topics")
    )


def _cameras(rows: pa.Table) -> tuple[str, ...]:
    """Every camera topic of the curated episodes, sorted: the manifest's camera set."""
    topics = {
        t["topic"]
        for row in rows["topics"].to_pylist()
        for t in json.loads(row)
        if t.get("kind") == "camera"
    }
    return tuple(sorted(topics))


def _norm_stats(rows: pa.Table) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for row in rows.to_pylist():
        entry = stats.setdefault(
            row["field"], {"count": 0, "sum": [], "sum_sq": [], "min": [], "max": []}
        )
        entry["count"] = max(entry["count"], int(row["count"]))
        for key in ("sum", "sum_sq", "min", "max"):
            entry[key].append(float(row[key]))
    return stats


def _find_reusable(conn: psycopg.Connection[Any], key: str) -> CurationResult | None:
    row = conn.execute(
        "SELECT id, rows, samples, size_bytes, snapshot_id, uri FROM manifests "
        "WHERE reuse_key = %s ORDER BY created_at LIMIT 1",
        (key,),
    ).fetchone()
    if row is None or not Path(row[5]).exists():
        return None
    return CurationResult(row[0], row[1], row[2], row[3], row[4], True, Path(row[5]))


def _register(
    conn: psycopg.Connection[Any],
    result: CurationResult,
    meta: ManifestMeta,
    key: str,
    author: str,
    table: pa.Table,
) -> None:
    episode_ids = np.unique(table["episode_id"].to_numpy(zero_copy_only=False)).tolist()
    with conn.transaction():
        inserted = conn.execute(
            "INSERT INTO manifests (id, reuse_key, sql, sample_spec, snapshot_id, cdc_position,"
            " rows, samples, size_bytes, uri, author) VALUES (%s, %s, %s, %s, %s, %s, %s, %s,"
            " %s, %s, %s) ON CONFLICT (id) DO NOTHING",
            (
                result.manifest_id,
                key,
                meta.sql,
                json.dumps(meta.sample_spec),
                result.snapshot_id,
                meta.cdc_position or "",
                result.rows,
                result.samples,
                result.size_bytes,
                str(result.path),
                author,
            ),
        ).rowcount
        if inserted == 0:  # the same bytes were built before, under another reuse key
            return
        copy_sql = "COPY manifest_episodes (manifest_id, episode_id) FROM STDIN"
        with conn.cursor().copy(copy_sql) as copy:
            for episode_id in episode_ids:
                copy.write_row((result.manifest_id, episode_id))
