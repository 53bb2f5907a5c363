"""Builds the FastAPI application. No module-level app: ``create_app(settings)`` is the entry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from curation.errors import CurationError
from episodes.errors import EpisodeError
from manifests.errors import (
    ManifestError,
    ManifestIdError,
    ManifestNotFoundError,
    ManifestSchemaError,
)
from service.api.middleware import BodyLimitMiddleware
from service.api.problems import PROBLEM_JSON, document_problems
from service.api.routes import (
    auth,
    cdc,
    corpus,
    curations,
    docs,
    episodes,
    health,
    manifests,
    metrics,
    sql,
)
from service.auth import TokenCache, challenge
from service.context import ServiceContext
from service.errors import ServiceError
from service.metrics import MetricsMiddleware, ServiceMetrics
from service.settings import ServiceSettings
from service.sink_auth import JwtIssuer
from warehouse.errors import (
    QueryError,
    QueryTimeoutError,
    RowLimitError,
    WarehouseError,
    WarehouseUnavailableError,
)

# The one place where errors of every package become HTTP: (type, status, title), first match.
_ERROR_STATUS: list[tuple[type[Exception], int, str]] = [
    (QueryTimeoutError, 408, "Query timed out"),
    (RowLimitError, 422, "Too many rows"),
    (QueryError, 400, "Query failed"),
    (WarehouseUnavailableError, 503, "Warehouse unavailable"),
    (WarehouseError, 500, "Warehouse error"),
    (ManifestNotFoundError, 404, "Manifest not found"),
    (ManifestIdError, 400, "Bad manifest ID"),
    (ManifestSchemaError, 422, "Result does not fit a manifest"),
    (ManifestError, 500, "Manifest error"),
    (EpisodeError, 422, "Bad episode"),
]

# Routes that take larger bodies than ``service.max_body_bytes``, by path prefix.
_BODY_LIMITS = {"/v1/cdc/": 64 << 20}  # Debezium batches


def create_app(settings: ServiceSettings) -> FastAPI:
    """The Quarry HTTP API."""
    app = FastAPI(
        title="Quarry",
        version="0.1.0",
        description="Curation and manifest service for robot-learning data.",
        lifespan=_lifespan,
        docs_url=None,  # served by routes/docs.py from local assets
        redoc_url=None,
    )
    context = ServiceContext(settings)
    app.state.context = context
    app.state.tokens = TokenCache(
        context.connect, settings.service.token_cache_s, jwt=_jwt_issuer(settings)
    )
    app.state.metrics = ServiceMetrics(context.cdc_liveness, context.pipeline_totals)
    app.state.health_threads = anyio.CapacityLimiter(4)
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.service.max_body_bytes, limits=_BODY_LIMITS
    )
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    for router in (
        health.router,
        metrics.router,
        curations.router,
        manifests.router,
        sql.router,
        corpus.router,
        episodes.router,
        cdc.router,
        auth.router,
        docs.router,
    ):
        app.include_router(router)
    docs.mount_assets(app)
    document_problems(app)
    for domain in (ServiceError, CurationError):
        app.add_exception_handler(domain, _service_problem)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_problem)  # type: ignore[arg-type]
    for kind, _, _ in _ERROR_STATUS:
        app.add_exception_handler(kind, _package_problem)
    app.add_exception_handler(RequestValidationError, _validation_problem)  # type: ignore[arg-type]
    return app


def _jwt_issuer(settings: ServiceSettings) -> JwtIssuer | None:
    section = settings.service
    if section.jwt_secret is None:
        return None
    return JwtIssuer(section.jwt_secret, section.jwt_max_minutes, section.jwt_max_refresh_minutes)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """On shutdown, stop the curation runtime's pools and jobs and close warehouse handles."""
    yield
    runtime = getattr(app.state, "curation_runtime", None)
    if runtime is not None:
        runtime.close()
    app.state.context.close()


def problem_body(
    request: Request, status: int, title: str, detail: str, **extra: Any
) -> dict[str, Any]:
    """An RFC 9457 problem document; ``extra`` adds scalar members (reason, manifest_id...)
    and lists of scalars (an ambiguous ID's candidates)."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
    }
    body.update({k: v for k, v in extra.items() if k not in body and _member(v)})
    return body


def _member(value: Any) -> bool:
    scalar = (str, int, float, bool)
    if isinstance(value, list | tuple):
        return all(isinstance(item, scalar) for item in value)
    return isinstance(value, scalar)


def _respond(body: dict[str, Any], headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=body["status"], media_type=PROBLEM_JSON, headers=headers)


async def _service_problem(request: Request, error: ServiceError | CurationError) -> JSONResponse:
    """Errors that carry their own status and title (the app's and the curation engine's)."""
    body = problem_body(request, error.status, error.title, error.message, **error.context)
    authenticate = challenge(error)
    return _respond(body, {"WWW-Authenticate": authenticate} if authenticate else None)


async def _http_problem(request: Request, error: HTTPException) -> JSONResponse:
    """Starlette's own answers (unknown path, wrong method, body too large) as problems."""
    title = HTTPStatus(error.status_code).phrase
    detail = error.detail if isinstance(error.detail, str) else title
    return _respond(problem_body(request, error.status_code, title, detail), error.headers)


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
