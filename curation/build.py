"""Builds a manifest from a curation: guard, pin a snapshot, query, count samples, write,
register. Reuses an existing manifest when the same curation already ran on the same data."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from curation.cancel import CancelScope
from curation.compose import (
    CURATED_IDS,
    OBJECTS_VIEW,
    STATS_VIEW,
    compose,
    probe_query,
    stats_query,
)
from curation.freshness import LagBound, check_lag, warehouse_lag_s
from curation.guard import CheckedQuery, CurationRefusedError, check_curation
from curation.norm import norm_stats
from curation.render import render
from episodes.errors import EpisodeError
from episodes.spec import SampleSpec
from manifests.build import ManifestInfo, build_manifest
from manifests.meta import ManifestMeta
from warehouse.base import CURATION_VIEWS
from warehouse.changes import Position
from warehouse.errors import QueryError

CURATION_RELATIONS = frozenset(CURATION_VIEWS)
#: Row cap of the service's own queries around a curation (see ``run_query``).
INTERNAL_MAX_ROWS = 1_000_000
# Views a build reads besides the curation's own (see compose): they name the data too.
READ_BY_BUILD = frozenset({OBJECTS_VIEW, STATS_VIEW})
#: Columns of ``episode_objects`` the manifest query carries for the build (the camera set).
CARRY = ("topics",)


class CurationSource(Protocol):
    """What a curation needs of the warehouse (any :class:`warehouse.base.Warehouse` is one):
    a pinned snapshot and bounded reads, in the SQL dialect (sqlglot's name) of the backend,
    ``dialect``, that ``cancel(tag)`` stops."""

    @property
    def dialect(self) -> str: ...

    def current_snapshot(self) -> int: ...

    def data_version(self, views: Collection[str], *, at: int | None = None) -> int: ...

    def position(self, *, at: int | None = None) -> Position | None: ...

    def query_arrow(
        self,
        sql: str,
        *,
        snapshot_id: int | None,
        timeout_s: float,
        max_rows: int,
        tables: Mapping[str, pa.Table] | None = None,
        tag: str | None = None,
    ) -> pa.Table: ...

    def cancel(self, tag: str) -> None: ...


@dataclass(frozen=True)
class CurationLimits:
    timeout_s: float = 30.0
    max_rows: int = 50_000_000
    lag: LagBound = field(default_factory=LagBound)


@dataclass(frozen=True)
class CurationRequest:
    sql: str
    sample_spec: dict[str, Any] | None = None
    author: str = "local"


@dataclass(frozen=True)
class CurationResult:
    """A built or reused manifest. ``warehouse_lag_s``: seconds the warehouse's data was
    behind the source when this curation pinned its snapshot (``None``: unknown; see
    :mod:`curation.freshness`); ``lag_warning``: why that is past the bound, when the bound
    warns instead of refusing."""

    manifest_id: str
    rows: int
    samples: int
    size_bytes: int
    snapshot_id: int
    reused: bool
    path: Path
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
            "warehouse_lag_s": self.warehouse_lag_s,
            "lag_warning": self.lag_warning,
        }


def parse_spec(raw: dict[str, Any] | None) -> SampleSpec:
    """The sample spec of a request; a bad one is a refused curation."""
    if "\\u0000" in json.dumps(raw):  # the registry (Postgres jsonb) cannot hold NUL
        raise CurationRefusedError(
            "bad sample_spec: it contains a NUL character", reason="sample_spec"
        )
    try:
        return SampleSpec.from_dict(raw if raw is not None else {})
    except EpisodeError as error:
        raise CurationRefusedError(f"bad sample_spec: {error}", reason="sample_spec") from None


def check_request(request: CurationRequest) -> tuple[CheckedQuery, SampleSpec]:
    """The guard's verdict on the request's SQL, and its parsed sample spec."""
    return check_curation(request.sql, CURATION_RELATIONS), parse_spec(request.sample_spec)


def pin(checked: CheckedQuery, source: CurationSource) -> tuple[int, int]:
    """The snapshot a curation reads (the current one) and its data version there (the last
    snapshot that changed anything the manifest query reads).

    The version names the data in the reuse key: unrelated commits do not change it. The
    build reads, and the manifest records, the current snapshot itself: it exists now and
    stays while a manifest references it, whereas the version may be an old snapshot that
    maintenance has already expired (nothing referenced it and its data did not change).
    """
    current = source.current_snapshot()
    return current, source.data_version(checked.relations | READ_BY_BUILD, at=current)


def run_curation(
    request: CurationRequest,
    source: CurationSource,
    conn: psycopg.Connection[Any],
    manifest_dir: Path,
    limits: CurationLimits,
    scope: CancelScope | None = None,
) -> CurationResult:
    """Build (or reuse) the manifest of ``request`` and register it in Postgres. A cancelled
    ``scope`` stops the build at its next query (or interrupts the running one). The pinned
    snapshot's warehouse lag is measured first and held to ``limits.lag``: past a refusing
    bound nothing is built (:class:`~curation.errors.WarehouseLagError`)."""
    checked, spec = check_request(request)
    snapshot, version = pin(checked, source)
    lag = warehouse_lag_s(source.position(at=snapshot), conn)
    warning = check_lag(lag, limits.lag, snapshot)
    key = reuse_key(checked, spec, version)
    existing = _find_reusable(conn, key)
    if existing is not None:
        return replace(existing, warehouse_lag_s=lag, lag_warning=warning)
    info, meta, episode_ids = build_at(checked, spec, snapshot, source, limits, manifest_dir, scope)
    result = CurationResult(
        info.manifest_id,
        info.num_rows,
        info.num_samples,
        info.size_bytes,
        snapshot,
        False,
        info.path,
        lag,
        warning,
    )
    if scope is not None:
        scope.check()
    _register(conn, result, meta, key, request.author, episode_ids)
    return result


def build_at(
    checked: CheckedQuery,
    spec: SampleSpec,
    snapshot: int,
    source: CurationSource,
    limits: CurationLimits,
    out_dir: Path,
    scope: CancelScope | None = None,
) -> tuple[ManifestInfo, ManifestMeta, list[str]]:
    """Query the curation at ``snapshot`` and write its manifest under ``out_dir``; the same
    arguments over the same warehouse give the same bytes. Returns the manifest, its
    metadata and its episode ids."""
    table, norm_stats, cameras = _query(checked, spec, source, snapshot, limits, scope)
    if spec.cameras is None and cameras:
        spec = replace(spec, cameras=cameras)
    position = source.position(at=snapshot)
    meta = ManifestMeta(
        sql=checked.normalized,
        sample_spec=spec.to_dict(),
        snapshot_id=snapshot,
        cdc_position=position.to_json() if position is not None else None,
        norm_stats=norm_stats,
    )
    if scope is not None:
        scope.check()
    info = build_manifest(table, meta, out_dir)
    ids = pc.unique(table["episode_id"])
    return info, meta, ids.take(pc.sort_indices(ids)).to_pylist()


def reuse_key(checked: CheckedQuery, spec: SampleSpec, snapshot: int) -> str:
    """Same normalized query, same sample spec, same data: the same manifest."""
    material = json.dumps([checked.normalized, spec.to_dict(), snapshot], sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def run_query(
    tree: exp.Expr,
    source: CurationSource,
    snapshot: int,
    limits: CurationLimits,
    scope: CancelScope | None = None,
    *,
    internal: bool = False,
    tables: Mapping[str, pa.Table] | None = None,
) -> pa.Table:
    """One query of a curation at ``snapshot``, within ``limits``, stopped by ``scope``,
    with the Arrow ``tables`` readable by name.

    The row cap is the curation's for the manifest query; an ``internal`` query (the column
    probe, statistics, a preview's groups) has a few rows per field, dimension or robot and
    task by construction, and is held to :data:`INTERNAL_MAX_ROWS` instead.
    """
    tag = scope.watch(source.cancel) if scope is not None else None
    try:
        return source.query_arrow(
            render(tree, source.dialect),
            snapshot_id=snapshot,
            timeout_s=limits.timeout_s,
            max_rows=INTERNAL_MAX_ROWS if internal else limits.max_rows,
            tables=tables,
            tag=tag,
        )
    except QueryError:
        if scope is not None:
            scope.check()  # an interrupt by cancel reads as a cancel, not a failed query
        raise


def _query(
    checked: CheckedQuery,
    spec: SampleSpec,
    source: CurationSource,
    snapshot: int,
    limits: CurationLimits,
    scope: CancelScope | None,
) -> tuple[pa.Table, dict[str, Any], tuple[str, ...]]:
    """The manifest's rows (with ``num_samples``; slices without a sample left out), its
    normalization statistics and camera set, from one pass of the curation: the statistics
    and cameras cover every episode the manifest query returned."""
    probe = run_query(probe_query(checked), source, snapshot, limits, scope, internal=True)
    composed = compose(checked, probe.column_names, CARRY)
    table = run_query(composed.tree, source, snapshot, limits, scope)
    topics = composed.hidden["topics"]
    cameras = _cameras(table[topics])
    ids = pa.table({"episode_id": pc.unique(table["episode_id"])})
    table = table.drop_columns([topics])
    counts = spec.count_samples(
        table["start_ns"].to_numpy(zero_copy_only=False),
        table["end_ns"].to_numpy(zero_copy_only=False),
    )
    table = table.append_column("num_samples", pa.array(counts, type=pa.int64()))
    table = table.filter(pa.array(counts > 0))
    rows = run_query(
        stats_query(), source, snapshot, limits, scope, internal=True, tables={CURATED_IDS: ids}
    )
    return table, norm_stats(rows), cameras


def _cameras(topics: pa.ChunkedArray) -> tuple[str, ...]:
    """Every camera topic of the curated episodes, sorted: the manifest's camera set."""
    names = {
        t["topic"]
        for document in pc.unique(topics).to_pylist()
        if document is not None
        for t in json.loads(document)
        if t.get("kind") == "camera"
    }
    return tuple(sorted(names))


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
    episode_ids: list[str],
) -> None:
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


@dataclass(frozen=True)
class RebuildResult:
    """A rebuild of a registered manifest at its pinned snapshot.

    :param identical: whether the rebuilt bytes (so the ID) equal the original's.
    """

    manifest_id: str
    rebuilt_id: str
    identical: bool
    snapshot_id: int
    rows: int
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rebuild_manifest(
    manifest_id: str,
    meta: ManifestMeta,
    source: CurationSource,
    work_dir: Path,
    limits: CurationLimits,
    scope: CancelScope | None = None,
) -> RebuildResult:
    """Rebuild manifest ``manifest_id`` from its recorded SQL and sample spec at its pinned
    snapshot, in a temporary folder under ``work_dir`` that is removed afterwards."""
    if not isinstance(meta.snapshot_id, int):
        raise CurationRefusedError(
            f"manifest {manifest_id} records no warehouse snapshot to rebuild at",
            reason="no_snapshot",
            manifest_id=manifest_id,
        )
    checked = check_curation(meta.sql, CURATION_RELATIONS)
    spec = parse_spec(meta.sample_spec)
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir, prefix=".rebuild-") as folder:
        info, _, _ = build_at(checked, spec, meta.snapshot_id, source, limits, Path(folder), scope)
    return RebuildResult(
        manifest_id,
        info.manifest_id,
        info.manifest_id == manifest_id,
        meta.snapshot_id,
        info.num_rows,
        info.num_samples,
    )
