"""Builds the FastAPI application. No module-level app: ``create_app(settings)`` is the entry."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.api.routes import health
from service.context import ServiceContext
from service.errors import ServiceError
from service.settings import Settings

PROBLEM_JSON = "application/problem+json"


def create_app(settings: Settings) -> FastAPI:
    """The Quarry HTTP API for one state folder."""
    app = FastAPI(
        title="Quarry",
        version="0.1.0",
        description="Curation and manifest service for robot-learning data.",
    )
    app.state.context = ServiceContext(settings)
    app.include_router(health.router)
    app.add_exception_handler(ServiceError, _problem)  # type: ignore[arg-type]
    return app


async def _problem(request: Request, error: ServiceError) -> JSONResponse:
    """Map a domain error to an RFC 9457 problem document: the one place errors become HTTP."""
    body = {
        "type": "about:blank",
        "title": error.title,
        "status": error.status,
        "detail": error.message,
        "instance": request.url.path,
    }
    body.update({k: v for k, v in error.context.items() if isinstance(v, str | int | float)})
    return JSONResponse(body, status_code=error.status, media_type=PROBLEM_JSON)
