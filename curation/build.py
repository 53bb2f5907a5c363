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

import numpy as np
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
from curation.errors import EmptyCurationError
from curation.freshness import LagBound, check_lag, warehouse_lag_s
from curation.guard import CheckedQuery, CurationRefusedError, check_curation
from curation.lineage import lineage_rows
from curation.norm import norm_stats
from curation.params import ParamValue
from curation.registration import (
    CurationResult,
    ManifestAnnotation,
    register_manifest,
    reuse_manifest,
)
from curation.render import render
from episodes.errors import EpisodeError
from episodes.spec import SampleSpec
from manifests.build import ManifestInfo, prepare_table, write_prepared
from manifests.meta import ManifestMeta
from manifests.objects import ManifestPlace
from manifests.schema import FORMAT_VERSION
from manifests.store import ManifestStore
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

    def append_lineage(self, manifest_id: str, episodes: pa.Table) -> None: ...


@dataclass(frozen=True)
class CurationLimits:
    timeout_s: float = 30.0
    max_rows: int = 50_000_000
    lag: LagBound = field(default_factory=LagBound)


@dataclass(frozen=True)
class CurationRequest:
    """A curation as the engine takes it.

    ``params`` fill the SQL's ``'<name>'`` placeholders (:mod:`curation.params`); the manifest
    records the SQL with them bound. ``name``, ``tags`` and ``description`` go to the registry,
    never into the manifest file (they change neither its bytes nor its ID); ``allow_empty``
    registers a manifest without a sample instead of refusing the curation
    (:class:`EmptyCurationError`).
    """

    sql: str
    sample_spec: dict[str, Any] | None = None
    author: str = "local"
    params: Mapping[str, ParamValue] | None = None
    name: str = ""
    tags: tuple[str, ...] = ()
    description: str = ""
    allow_empty: bool = False

    @property
    def annotation(self) -> ManifestAnnotation:
        return ManifestAnnotation(self.name, self.tags, self.description)


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
    checked = check_curation(request.sql, CURATION_RELATIONS, request.params)
    return checked, parse_spec(request.sample_spec)


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
    manifests: Path | ManifestPlace,
    limits: CurationLimits,
    scope: CancelScope | None = None,
) -> CurationResult:
    """Build (or reuse) the manifest of ``request``, publish it to ``manifests`` (a folder, or
    a store: an object store uploads it before it is registered) and register it in
    Postgres. A cancelled
    ``scope`` stops the build at its next query (or interrupts the running one). The pinned
    snapshot's warehouse lag is measured first and held to ``limits.lag``: past a refusing
    bound nothing is built (:class:`~curation.errors.WarehouseLagError`).

    :raises EmptyCurationError: the manifest would hold no sample and the request does not
        say ``allow_empty``.
    """
    checked, spec = check_request(request)
    snapshot, version = pin(checked, source)
    lag = warehouse_lag_s(source.position(at=snapshot), conn)
    warning = check_lag(lag, limits.lag, snapshot)
    key = reuse_key(checked, spec, version)
    place = ManifestStore(manifests) if isinstance(manifests, Path) else manifests
    existing = reuse_manifest(
        conn, key, request.annotation, snapshot, request.allow_empty, exists=place.exists
    )
    if existing is not None:
        return replace(existing, warehouse_lag_s=lag, lag_warning=warning)
    with place.staging() as out_dir:
        info, meta, lineage = build_at(
            checked, spec, snapshot, source, limits, out_dir, scope, allow_empty=request.allow_empty
        )
        location = place.publish(info)
    result = CurationResult(
        info.manifest_id,
        info.num_rows,
        info.num_samples,
        info.size_bytes,
        snapshot,
        False,
        location,
        warehouse_lag_s=lag,
        lag_warning=warning,
    )
    if scope is not None:
        scope.check()
    return register_manifest(
        conn, source.append_lineage, result, meta, key, request.author, request.annotation, lineage
    )


def build_at(
    checked: CheckedQuery,
    spec: SampleSpec,
    snapshot: int,
    source: CurationSource,
    limits: CurationLimits,
    out_dir: Path,
    scope: CancelScope | None = None,
    *,
    allow_empty: bool = True,
    format_version: int = FORMAT_VERSION,
) -> tuple[ManifestInfo, ManifestMeta, pa.Table]:
    """Query the curation at ``snapshot`` and write its manifest, of ``format_version`` (a
    rebuild writes its original's), under ``out_dir``; the same arguments over the same
    warehouse give the same bytes. Returns the manifest, its metadata and its lineage
    (:func:`curation.lineage.lineage_rows`).

    :raises EmptyCurationError: no slice holds a sample and not ``allow_empty`` (before
        anything is written).
    """
    table, norm_stats, cameras = _query(
        checked, spec, source, snapshot, limits, scope, allow_empty=allow_empty
    )
    if spec.cameras is None and cameras:
        spec = replace(spec, cameras=cameras)
    meta = ManifestMeta(
        sql=checked.normalized,
        sample_spec=spec.to_dict(),
        snapshot_id=snapshot,
        cdc_position=_recorded_position(source.position(at=snapshot), format_version),
        norm_stats=norm_stats,
        format_version=format_version,
    )
    if scope is not None:
        scope.check()
    prepared = prepare_table(table, meta)
    info = write_prepared(prepared, out_dir)
    return info, meta, lineage_rows(prepared)


def _recorded_position(
    position: Position | None, format_version: int
) -> dict[str, Any] | str | None:
    """The CDC position as a manifest of ``format_version`` records it: a JSON object from
    version 2, its JSON text in version 1 (byte for byte what version 1 wrote)."""
    if position is None:
        return None
    return position.to_dict() if format_version >= 2 else position.to_json()


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
    *,
    allow_empty: bool,
) -> tuple[pa.Table, dict[str, Any], tuple[str, ...]]:
    """The manifest's rows (with ``num_samples``; slices without a sample left out), its
    normalization statistics and camera set, from one pass of the curation: the statistics
    and cameras cover every episode the manifest query returned. No row left and not
    ``allow_empty``: :class:`EmptyCurationError`."""
    probe = run_query(probe_query(checked), source, snapshot, limits, scope, internal=True)
    composed = compose(checked, probe.column_names, CARRY)
    # In the manifest's order, which the engine sorts in parallel and the build then keeps
    # (manifests.build.prepare_table checks it and sorts only rows that are not).
    ordered = composed.tree.order_by(exp.column("episode_id"), exp.column("start_ns"))
    table = run_query(ordered, source, snapshot, limits, scope)
    topics = composed.hidden["topics"]
    cameras = _cameras(table[topics])
    # The statistics query reads these ids through IN: a sliced curation's repeated ids need
    # no dedupe here (at 439k episodes `unique` cost 0.2 s).
    ids = table.select(["episode_id"])
    table = table.drop_columns([topics])
    counts = spec.count_samples(
        table["start_ns"].to_numpy(zero_copy_only=False),
        table["end_ns"].to_numpy(zero_copy_only=False),
    )
    table = table.append_column("num_samples", pa.array(counts, type=pa.int64()))
    matched = table.num_rows
    keep = counts > 0
    table = table.filter(pa.array(keep)) if not keep.all() else _canonical_buffers(table)
    if table.num_rows == 0 and not allow_empty:
        raise EmptyCurationError.at(snapshot, matched, spec.anchor_step_ns)
    rows = run_query(
        stats_query(), source, snapshot, limits, scope, internal=True, tables={CURATED_IDS: ids}
    )
    return table, norm_stats(rows), cameras


def _canonical_buffers(table: pa.Table) -> pa.Table:
    """``table`` with the bytes of its columns independent of the engine that made them, as
    a table filter leaves them, copying only the columns where engines differ.

    Under a null, an engine may leave any value in a column's data buffer (DuckDB leaves the
    smallest int64 under a null ``ended_at``, ClickHouse zero), and the bits past a boolean's
    last value are free too; the file stores both, so the manifest's bytes would depend on
    the engine. ``Table.filter`` writes zeros there (an array's own ``filter`` with every row
    selected keeps the input's bytes). Columns without nulls, booleans or nesting are written
    from their values alone and are kept as they are: at 439k rows a filter of every column
    took 0.32 s of a 43M-row curation. The bytes are those the filter of the whole table
    gave, so pinned manifests rebuild identical.
    """
    copied = [
        index
        for index, column in enumerate(table.columns)
        if column.null_count or pa.types.is_boolean(column.type) or pa.types.is_nested(column.type)
    ]
    if not copied:
        return table
    every_row = pa.array(np.ones(table.num_rows, dtype=bool))
    filtered = table.select(copied).filter(every_row)
    for position, index in enumerate(copied):
        table = table.set_column(index, table.field(index), filtered.column(position))
    return table


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
        info, _, _ = build_at(
            checked,
            spec,
            meta.snapshot_id,
            source,
            limits,
            Path(folder),
            scope,
            format_version=meta.format_version,
        )
    return RebuildResult(
        manifest_id,
        info.manifest_id,
        info.manifest_id == manifest_id,
        meta.snapshot_id,
        info.num_rows,
        info.num_samples,
    )
