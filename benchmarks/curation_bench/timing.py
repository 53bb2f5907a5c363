"""The SQL path, timed where a user meets it: ``POST /v1/curations`` on the running service
(guard, pinned snapshot, warehouse query, sample counts, normalization statistics, manifest
write, registration), with the warehouse kept quiet between runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import httpx
import psycopg
import pyarrow as pa
from pinned import CURATION_SQL, SPEC

from curation.build import CurationLimits, CurationRequest, run_curation
from warehouse.base import Warehouse

MIRROR_TIMEOUT_S = 900.0


def wait_for_mirror(
    warehouse: Warehouse, conn: psycopg.Connection[Any], table: str, expected: int
) -> float:
    """Wait until CDC has brought ``table`` (a curation view) to ``expected`` rows, or to
    Postgres's count when ``expected`` is negative; return the seconds waited."""
    started = time.monotonic()
    if expected < 0:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # a constant name
        expected = int(row[0]) if row else 0
    while time.monotonic() - started < MIRROR_TIMEOUT_S:
        seen = warehouse.query_arrow(f"SELECT count(*) AS n FROM {table}")["n"][0].as_py()
        if seen == expected:
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError(f"CDC did not bring {table} to {expected} rows in {MIRROR_TIMEOUT_S} s")


def curate(api: httpx.Client, anchor_stride: int, sql: str = CURATION_SQL) -> dict[str, Any]:
    """One curation; a new sample spec each time, so the service builds instead of reusing."""
    spec = replace(SPEC, anchor_stride=anchor_stride).to_dict()
    started = time.perf_counter()
    response = api.post("/v1/curations", json={"sql": sql, "sample_spec": spec})
    seconds = time.perf_counter() - started
    if response.status_code != 201:
        raise RuntimeError(f"curation failed ({response.status_code}): {response.text[:500]}")
    body = dict(response.json())
    if body["reused"]:
        raise RuntimeError("the service reused a manifest: the timing would not be a build")
    return {**body, "seconds": seconds}


def time_curations(
    api: httpx.Client,
    warehouse: Warehouse,
    conn: psycopg.Connection[Any],
    repeats: int,
) -> dict[str, Any]:
    """``repeats`` builds of ``CURATION_SQL``: the median seconds, and the first build (at
    ``SPEC``; the others raise the anchor stride by one each).

    Each build writes its lineage to the warehouse and registers its manifest in Postgres,
    which CDC then mirrors; the next build starts once that is done, so no run competes with
    the previous one's CDC."""
    runs = []
    for repeat in range(repeats):
        runs.append(curate(api, SPEC.anchor_stride + repeat))
        wait_for_mirror(warehouse, conn, "manifests", -1)
    seconds = [run["seconds"] for run in runs]
    return {
        "seconds": statistics.median(seconds),
        "runs_s": [round(s, 4) for s in seconds],
        "rows": runs[0]["rows"],
        "samples": runs[0]["samples"],
        "manifest_bytes": runs[0]["size_bytes"],
        "manifest_id": runs[0]["manifest_id"],
    }


class TimedSource:
    """The warehouse as a curation sees it, timing each call (what the build spends where)."""

    def __init__(self, warehouse: Warehouse) -> None:
        self._warehouse = warehouse
        self.lineage: pa.Table | None = None  # the last lineage written
        self.seconds: dict[str, float] = {}
        self.sql: dict[str, str] = {}  # the last query of each kind

    @property
    def dialect(self) -> str:
        return self._warehouse.dialect

    def _add(self, what: str, started: float) -> None:
        self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - started

    def current_snapshot(self) -> int:
        started = time.perf_counter()
        try:
            return self._warehouse.current_snapshot()
        finally:
            self._add("current_snapshot", started)

    def data_version(self, views: Any, *, at: int | None = None) -> int:
        started = time.perf_counter()
        try:
            return self._warehouse.data_version(views, at=at)
        finally:
            self._add("data_version", started)

    def position(self, *, at: int | None = None) -> Any:
        started = time.perf_counter()
        try:
            return self._warehouse.position(at=at)
        finally:
            self._add("position", started)

    def query_arrow(self, sql: str, **options: Any) -> Any:
        started = time.perf_counter()
        self.sql[_query_kind(sql)] = sql
        try:
            return self._warehouse.query_arrow(sql, **options)
        finally:
            self._add(_query_kind(sql), started)

    def append_lineage(self, manifest_id: str, episodes: pa.Table) -> None:
        self.lineage = episodes
        started = time.perf_counter()
        try:
            self._warehouse.append_lineage(manifest_id, episodes)
        finally:
            self._add("lineage", started)


class TimedConnection:
    """A Postgres connection that adds up the seconds of its transactions: a build opens
    one, to register its manifest and lineage (``register``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.seconds = 0.0
        self.wal_bytes = 0

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        before = wal_position(self._conn)
        started = time.perf_counter()
        try:
            with self._conn.transaction() as tx:
                yield tx
        finally:
            self.seconds += time.perf_counter() - started
            self.wal_bytes += wal_since(self._conn, before)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _query_kind(sql: str) -> str:
    if sql.rstrip().upper().endswith("LIMIT 0"):
        return "query_probe"
    if "episode_stat_rows" in sql:
        return "query_stats"
    return "query_manifest"


def profile_curation(
    warehouse: Warehouse,
    conn: psycopg.Connection[Any],
    manifest_dir: Path,
    anchor_stride: int,
    timeout_s: float,
) -> dict[str, Any]:
    """One build through the service's own ``run_curation``, in this process, with the
    seconds of each warehouse call, the manifest's path (``manifest``) and query (``sql``);
    ``write_and_register`` is the rest (guard, sample counts, manifest write, registration),
    of which ``register`` is the registration (the manifest's row and its lineage)."""
    source = TimedSource(warehouse)
    timed = TimedConnection(conn)
    request = CurationRequest(CURATION_SQL, replace(SPEC, anchor_stride=anchor_stride).to_dict())
    started = time.perf_counter()
    registry = cast(psycopg.Connection[Any], timed)
    limits = CurationLimits(timeout_s=timeout_s)
    result = run_curation(request, source, registry, manifest_dir, limits)
    total = time.perf_counter() - started
    if result.reused:
        raise RuntimeError("the profiled build reused a manifest")
    seconds = {k: round(v, 4) for k, v in sorted(source.seconds.items())}
    seconds["write_and_register"] = round(total - sum(source.seconds.values()), 4)
    seconds["register"] = round(timed.seconds, 4)
    manifest_sql = source.sql.get("query_manifest")
    lineage = source.lineage if source.lineage is not None else pa.table({"episode_id": []})
    registration = {
        "episodes": lineage.num_rows,
        "new_s": seconds["register"],
        "new_lineage_s": seconds.get("lineage", 0.0),
        "new_wal_bytes": timed.wal_bytes,
        **old_registration(conn, result.manifest_id, lineage),
    }
    return {
        "total": round(total, 4),
        **seconds,
        "manifest": str(result.path),
        "sql": manifest_sql,
        "registration": registration,
    }


def wal_position(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    return str(row[0]) if row else "0/0"


def wal_since(conn: psycopg.Connection[Any], before: str) -> int:
    """Bytes of WAL written (by anyone) since position ``before``."""
    row = conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", (before,)
    ).fetchone()
    return int(row[0]) if row else 0


#: The lineage table before Postgres migration 0007 (0001, less the foreign key 0003 dropped).
_OLD_TABLE = "bench_old_manifest_episodes"
_OLD_DDL = (
    f"CREATE TABLE {_OLD_TABLE} (manifest_id text NOT NULL, episode_id uuid NOT NULL, "
    "PRIMARY KEY (manifest_id, episode_id))",
    f"CREATE INDEX {_OLD_TABLE}_episode ON {_OLD_TABLE} (episode_id)",
)


def old_registration(
    conn: psycopg.Connection[Any], manifest_id: str, lineage: pa.Table
) -> dict[str, Any]:
    """The lineage registration before migration 0007, replayed on the same lineage: one
    row per episode COPYed, in one transaction, into a table shaped like the old
    ``manifest_episodes`` (its primary key and episode index); seconds and WAL bytes. The old
    table was also in the CDC publication, which sent every row on to the warehouse: that
    cost is not replayed here."""
    for statement in _OLD_DDL:
        conn.execute(statement)  # constant text
    try:
        before = wal_position(conn)
        started = time.perf_counter()
        with conn.transaction():
            copy_sql = f"COPY {_OLD_TABLE} (manifest_id, episode_id) FROM STDIN"
            with conn.cursor().copy(copy_sql) as copy:
                for episode_id in lineage["episode_id"].to_pylist():
                    copy.write_row((manifest_id, episode_id))
        seconds = time.perf_counter() - started
        wal = wal_since(conn, before)
    finally:
        conn.execute(f"DROP TABLE {_OLD_TABLE}")
    return {"old_s": round(seconds, 4), "old_wal_bytes": wal}
