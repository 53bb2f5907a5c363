"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.api.deps import Context

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up and serving requests. Touches nothing else."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
def readyz(context: Context) -> JSONResponse:
    """Every part this service needs answers: 200 when all do, 503 with the failing checks."""
    checks: dict[str, Any] = {"postgres": _check_postgres(context)}
    ready = all(check["ok"] for check in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


def _check_postgres(context: Context) -> dict[str, Any]:
    try:
        with context.connect() as conn:
            conn.execute("SELECT 1")
    except Exception as error:  # any failure means not ready; reported as text
        return {"ok": False, "error": str(error)}
    return {"ok": True}
