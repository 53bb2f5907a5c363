"""Builds the FastAPI application. No module-level app: ``create_app(settings)`` is the entry."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from episodes.errors import EpisodeError
from manifests.errors import ManifestError, ManifestNotFoundError, ManifestSchemaError
from service.api.routes import curations, health, manifests
from service.context import ServiceContext
from service.errors import ServiceError
from service.settings import Settings
from warehouse.errors import (
    QueryError,
    QueryTimeoutError,
    RowLimitError,
    WarehouseError,
    WarehouseUnavailableError,
)

PROBLEM_JSON = "application/problem+json"

# The one place where errors of every package become HTTP: (type, status, title), first match.
_ERROR_STATUS: list[tuple[type[Exception], int, str]] = [
    (QueryTimeoutError, 408, "Query timed out"),
    (RowLimitError, 422, "Too many rows"),
    (QueryError, 400, "Query failed"),
    (WarehouseUnavailableError, 503, "Warehouse unavailable"),
    (WarehouseError, 500, "Warehouse error"),
    (ManifestNotFoundError, 404, "Manifest not found"),
    (ManifestSchemaError, 422, "Result does not fit a manifest"),
    (ManifestError, 500, "Manifest error"),
    (EpisodeError, 422, "Bad episode"),
]


def create_app(settings: Settings) -> FastAPI:
    """The Quarry HTTP API for one state folder."""
    app = FastAPI(
        title="Quarry",
        version="0.1.0",
        description="Curation and manifest service for robot-learning data.",
    )
    app.state.context = ServiceContext(settings)
    for router in (health.router, curations.router, manifests.router):
        app.include_router(router)
    app.add_exception_handler(ServiceError, _service_problem)  # type: ignore[arg-type]
    for kind, _, _ in _ERROR_STATUS:
        app.add_exception_handler(kind, _package_problem)
    app.add_exception_handler(RequestValidationError, _validation_problem)  # type: ignore[arg-type]
    return app


def problem_body(
    request: Request, status: int, title: str, detail: str, **extra: Any
) -> dict[str, Any]:
    """An RFC 9457 problem document; ``extra`` adds scalar members (reason, manifest_id...)."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
    }
    body.update(
        {
            k: v
            for k, v in extra.items()
            if k not in body and isinstance(v, str | int | float | bool)
        }
    )
    return body


def _respond(body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=body["status"], media_type=PROBLEM_JSON)


async def _service_problem(request: Request, error: ServiceError) -> JSONResponse:
    return _respond(
        problem_body(request, error.status, error.title, error.message, **error.context)
    )


async def _package_problem(request: Request, error: Exception) -> JSONResponse:
    status, title = next((s, t) for kind, s, t in _ERROR_STATUS if isinstance(error, kind))
    context = getattr(error, "context", {})
    detail = getattr(error, "message", str(error))
    return _respond(problem_body(request, status, title, detail, **context))


async def _validation_problem(request: Request, error: RequestValidationError) -> JSONResponse:
    body = problem_body(
        request, 422, "Invalid request", "the request body or parameters are invalid; see errors"
    )
    body["errors"] = [
        {
            "loc": [str(p) for p in e.get("loc", [])],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in error.errors()
    ]
    return _respond(body)
