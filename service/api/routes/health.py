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
    """Every part this service needs answers: 200 when all do, 503 with the failing checks."""
    context: ServiceContext = request.app.state.context
    limiter: anyio.CapacityLimiter = request.app.state.health_threads
    checks = {"postgres": await to_thread.run_sync(_check_postgres, context, limiter=limiter)}
    ready = all(check["ok"] for check in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


def _check_postgres(context: ServiceContext) -> dict[str, Any]:
    try:
        with context.connect() as conn:
            conn.execute("SELECT 1")
    except Exception as error:  # any failure means not ready; reported as text
        return {"ok": False, "error": str(error)}
    return {"ok": True}
