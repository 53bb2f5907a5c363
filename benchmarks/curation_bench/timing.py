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

    Each build registers its manifest and episodes in Postgres, which CDC then mirrors; the
    next build starts once that is done, so no run competes with the previous one's CDC."""
    runs = []
    for repeat in range(repeats):
        runs.append(curate(api, SPEC.anchor_stride + repeat))
        wait_for_mirror(warehouse, conn, "manifest_episodes", -1)
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


class TimedConnection:
    """A Postgres connection that adds up the seconds of its transactions: a build opens
    one, to register its manifest and lineage (``register``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.seconds = 0.0

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        started = time.perf_counter()
        try:
            with self._conn.transaction() as tx:
                yield tx
        finally:
            self.seconds += time.perf_counter() - started

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
    return {"total": round(total, 4), **seconds, "manifest": str(result.path), "sql": manifest_sql}
