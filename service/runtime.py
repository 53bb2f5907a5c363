"""What the curation routes of one service process share: the warehouse source (metadata from
the service's warehouse, queries on a reader that a cancel can interrupt), bounded thread
pools for builds, and the job runner.

Builds never run on the event loop nor on the server's request thread pool: the routes await
them on :attr:`CurationRuntime.builds` (synchronous curations, previews, rebuilds) or queue
them as jobs on :attr:`CurationRuntime.job_pool`, so that any number of concurrent curations
leaves health checks and cheap requests free to answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from curation.build import (
    CurationLimits,
    CurationRequest,
    CurationResult,
    RebuildResult,
    rebuild_manifest,
    run_curation,
)
from curation.cancel import CancelScope, InterruptibleReader, KillableReader
from curation.jobs import Connect, JobRunner
from curation.preview import Preview, preview_curation
from manifests.meta import ManifestMeta
from service.settings import ServiceSettings
from warehouse.backends import dialect_of
from warehouse.base import Warehouse
from warehouse.changes import Position
from warehouse.config import WarehouseConfig
from warehouse.errors import WarehouseError

#: Concurrent synchronous builds, previews and rebuilds; more wait their turn.
BUILD_WORKERS = 8
#: Concurrent asynchronous jobs; more stay queued.
JOB_WORKERS = 4
#: Threads for short registry calls (job status, cancel, lineage), apart from the builds.
QUICK_WORKERS = 4
T = TypeVar("T")


class CancellableReader(Protocol):
    """Bounded reads that the current cancel scope can stop (see :mod:`cancel`)."""

    def query_arrow(
        self,
        sql: str,
        *,
        snapshot_id: int | None = None,
        timeout_s: float | None = None,
        max_rows: int | None = None,
        tables: Mapping[str, pa.Table] | None = None,
    ) -> pa.Table: ...

    def close(self) -> None: ...


class LakeSource:
    """A :class:`~curation.build.CurationSource`: snapshots, versions and positions
    from the warehouse, queries (in ``dialect``) on a reader that a cancel can stop: an
    :class:`InterruptibleReader` on DuckLake, a :class:`KillableReader` on ClickHouse (same
    limits). Make one with :func:`curation_source`."""

    def __init__(
        self, warehouse: Warehouse, reader: CancellableReader, dialect: str = "duckdb"
    ) -> None:
        self._warehouse = warehouse
        self._reader = reader
        self._dialect = dialect

    @property
    def dialect(self) -> str:
        return self._dialect

    def current_snapshot(self) -> int:
        return self._warehouse.current_snapshot()

    def data_version(self, views: Collection[str], *, at: int | None = None) -> int:
        return self._warehouse.data_version(views, at=at)

    def position(self, *, at: int | None = None) -> Position | None:
        return self._warehouse.position(at=at)

    def query_arrow(
        self,
        sql: str,
        *,
        snapshot_id: int | None,
        timeout_s: float,
        max_rows: int,
        tables: Mapping[str, pa.Table] | None = None,
    ) -> pa.Table:
        return self._reader.query_arrow(
            sql, snapshot_id=snapshot_id, timeout_s=timeout_s, max_rows=max_rows, tables=tables
        )

    def close(self) -> None:
        self._reader.close()


def curation_source(config: WarehouseConfig, warehouse: Warehouse) -> LakeSource:
    """The curation source of ``warehouse`` (opened from ``config``): its queries in the
    backend's dialect, on a reader that a cancel scope can stop."""
    if config.backend == "clickhouse":
        from warehouse.clickhouse.backend import ClickHouseWarehouse

        if not isinstance(warehouse, ClickHouseWarehouse):
            raise WarehouseError(
                f"the config names the ClickHouse backend but the warehouse is "
                f"{type(warehouse).__name__}"
            )
        return LakeSource(warehouse, KillableReader(warehouse), dialect_of(config))
    return LakeSource(warehouse, InterruptibleReader(config), dialect_of(config))


class CurationRuntime:
    """Curation machinery of one service process; see the module docstring."""

    def __init__(self, settings: ServiceSettings, warehouse: Warehouse, connect: Connect) -> None:
        section = settings.curation
        self.limits = CurationLimits(timeout_s=section.timeout_s, max_rows=section.max_rows)
        self.manifest_dir: Path = settings.manifest_dir
        self.source = curation_source(settings.warehouse, warehouse)
        self.connect = connect
        self.builds = ThreadPoolExecutor(BUILD_WORKERS, thread_name_prefix="curation-build")
        self.job_pool = ThreadPoolExecutor(JOB_WORKERS, thread_name_prefix="curation-job")
        self.quick_pool = ThreadPoolExecutor(QUICK_WORKERS, thread_name_prefix="curation-db")
        self.jobs = JobRunner(connect, self.job_pool)

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function(*args)`` on the build pool and await it."""
        return await asyncio.wrap_future(self.builds.submit(function, *args))

    async def quick(self, function: Callable[..., T], *args: Any) -> T:
        """Run a short database call on threads that builds never occupy, and await it."""
        return await asyncio.wrap_future(self.quick_pool.submit(function, *args))

    def curate(self, request: CurationRequest, scope: CancelScope | None = None) -> CurationResult:
        """Build (or reuse) and register the manifest of ``request`` (blocking)."""
        with self.connect() as conn:
            return run_curation(request, self.source, conn, self.manifest_dir, self.limits, scope)

    def preview(self, request: CurationRequest) -> Preview:
        """What ``request`` would build now (blocking)."""
        return preview_curation(request, self.source, self.limits)

    def rebuild(self, manifest_id: str, meta: ManifestMeta) -> RebuildResult:
        """Rebuild a registered manifest at its pinned snapshot (blocking)."""
        return rebuild_manifest(manifest_id, meta, self.source, self.manifest_dir, self.limits)

    def close(self) -> None:
        self.jobs.close()
        self.job_pool.shutdown(wait=False, cancel_futures=True)
        self.builds.shutdown(wait=False, cancel_futures=True)
        self.quick_pool.shutdown(wait=False, cancel_futures=True)
        self.source.close()
