"""Liveness and readiness.

Both answer however busy the service is: they run on the event loop, and readiness's one
blocking check runs on worker threads of its own (``app.state.health_threads``), never queued
behind curations and SQL queries in the shared thread pool.
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from cdc import liveness as cdc_liveness
from service.context import ServiceContext

router = APIRouter(tags=["health"])


class Liveness(BaseModel):
    status: str


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, Any]


@router.get("/healthz")
async def healthz() -> Liveness:
    """The process is up and serving requests. Touches nothing else."""
    return Liveness(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "A part this service needs is down"}},
)
async def readyz(request: Request) -> JSONResponse:
    """Every part this service needs answers: 200 when all do, 503 with the failing checks.
    ``checks.cdc`` tells whether the CDC writer feeding the warehouse is alive and advancing
    (``required: false``: a down or stalled follower is reported, and curations are held to
    ``curation.max_lag_s``, but reads and manifests still work, so it does not make the
    service unready)."""
    context: ServiceContext = request.app.state.context
    limiter: anyio.CapacityLimiter = request.app.state.health_threads
    checks = await to_thread.run_sync(_checks, context, limiter=limiter)
    ready = all(check["ok"] for check in checks.values() if check.get("required", True))
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


def _checks(context: ServiceContext) -> dict[str, dict[str, Any]]:
    """Postgres answers, and the CDC writer's liveness, on one connection."""
    try:
        with context.connect() as conn:
            conn.execute("SELECT 1")
            liveness = context.cdc_liveness(conn)
    except Exception as error:  # any failure means not ready; reported as text
        postgres: dict[str, Any] = {"ok": False, "error": str(error)}
        liveness = cdc_liveness.unreadable("", error)
    else:
        postgres = {"ok": True}
    cdc = {"ok": liveness.healthy, "required": False, **_cdc_summary(liveness)}
    return {"postgres": postgres, "cdc": cdc}


def _cdc_summary(liveness: cdc_liveness.Liveness) -> dict[str, Any]:
    doc = liveness.to_dict()
    doc.pop("status")  # the follower's full figures are on /metrics
    doc.pop("healthy")
    return doc
