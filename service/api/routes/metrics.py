"""Prometheus metrics (text exposition format), for scrapers: no token, like the health
routes; the service listens on loopback unless configured otherwise."""

from __future__ import annotations

import anyio
from anyio import to_thread
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.metrics import ServiceMetrics

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    """Request latency by route, requests in flight, curation and SQL outcomes, the CDC
    follower's lag and throughput, and this process's CPU and memory."""
    registry: ServiceMetrics = request.app.state.metrics
    limiter: anyio.CapacityLimiter = request.app.state.health_threads
    body = await to_thread.run_sync(registry.render, limiter=limiter)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
