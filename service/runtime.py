"""What the curation routes of one service process share: the service's warehouse as the
curation source (its queries carry a cancel scope's tag), bounded thread pools for builds, and
the job runner.

Builds never run on the event loop nor on the server's request thread pool: the routes await
them on :attr:`CurationRuntime.builds` (synchronous curations, previews, rebuilds) or queue
them as jobs on :attr:`CurationRuntime.job_pool`, so that any number of concurrent curations
leaves health checks and cheap requests free to answer.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from curation.build import (
    CurationLimits,
    CurationRequest,
    RebuildResult,
    rebuild_manifest,
    run_curation,
)
from curation.cancel import CancelScope
from curation.freshness import LagBound
from curation.jobs import Connect, JobRunner
from curation.preview import Preview, preview_curation
from curation.registration import CurationResult
from manifests.meta import ManifestMeta
from service.manifest_files import manifest_place
from service.settings import ServiceSettings
from warehouse.base import Warehouse

#: Concurrent synchronous builds, previews and rebuilds; more wait their turn.
BUILD_WORKERS = 8
#: Concurrent asynchronous jobs; more stay queued.
JOB_WORKERS = 4
#: Threads for short registry calls (job status, cancel, lineage), apart from the builds.
QUICK_WORKERS = 4
T = TypeVar("T")


class CurationRuntime:
    """Curation machinery of one service process; see the module docstring."""

    def __init__(self, settings: ServiceSettings, warehouse: Warehouse, connect: Connect) -> None:
        section = settings.curation
        self.limits = CurationLimits(
            timeout_s=section.timeout_s,
            max_rows=section.max_rows,
            lag=LagBound(section.max_lag_s, section.on_lag),
        )
        self.manifests = manifest_place(settings)
        # Rebuilds write in a scratch folder: the manifest folder, or a temp one (S3).
        self.scratch_dir: Path = (
            settings.manifest_dir if settings.manifests.url is None else Path(tempfile.gettempdir())
        )
        self.source = warehouse
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
            return run_curation(request, self.source, conn, self.manifests, self.limits, scope)

    def preview(self, request: CurationRequest) -> Preview:
        """What ``request`` would build now (blocking)."""
        return preview_curation(request, self.source, self.limits)

    def rebuild(self, manifest_id: str, meta: ManifestMeta) -> RebuildResult:
        """Rebuild a registered manifest at its pinned snapshot (blocking)."""
        return rebuild_manifest(manifest_id, meta, self.source, self.scratch_dir, self.limits)

    def close(self) -> None:
        self.jobs.close()
        self.job_pool.shutdown(wait=False, cancel_futures=True)
        self.builds.shutdown(wait=False, cancel_futures=True)
        self.quick_pool.shutdown(wait=False, cancel_futures=True)
