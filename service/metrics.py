"""Prometheus metrics of one service process, served on ``GET /metrics``.

Each app has its own registry (tests build several apps in one process): request latency per
route template, requests in flight, outcomes of curations and SQL queries, the CDC writer's
liveness and figures (judged from Postgres at every scrape, see ``cdc/metrics.py``) and the
process's own CPU and memory, and the ingest pipeline's progress (``service/pipeline_metrics.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cdc.liveness import Liveness
from cdc.metrics import LivenessCollector
from pipeline.progress import RunTotals
from service.pipeline_metrics import PipelineCollector

# Seconds; curations may legitimately run up to their timeout (30 s by default).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Requests whose path matched no route share one label value (no unbounded label sets).
UNMATCHED = "<unmatched>"
# (method, route template) -> the kind counted in quarry_queries_total.
_QUERY_ROUTES = {("POST", "/v1/curations"): "curation", ("POST", "/v1/sql"): "sql"}
_OUTCOMES = {400: "refused", 408: "timeout", 409: "stale", 413: "too_large", 422: "rejected"}


class ServiceMetrics:
    """The metrics of one app; :meth:`render` is the ``/metrics`` body. ``cdc_liveness``
    judges the CDC writer at each scrape (it never raises); ``pipeline`` reads the ingest
    pipeline's totals (``service/pipeline_metrics.py``; an error is reported, not raised)."""

    def __init__(
        self,
        cdc_liveness: Callable[[], Liveness],
        pipeline: Callable[[], list[RunTotals]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "quarry_http_request_duration_seconds",
            "Time from request to the end of the response, by route template",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "quarry_http_requests_in_flight",
            "Requests being served now",
            registry=self.registry,
        )
        self.queries = Counter(
            "quarry_queries",
            "Curations and SQL queries by outcome (ok, refused, timeout, stale, too_large, "
            "rejected, error)",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.registry.register(LivenessCollector(cdc_liveness))
        if pipeline is not None:
            self.registry.register(PipelineCollector(pipeline))
        ProcessCollector(registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.latency.labels(method, route, str(status)).observe(seconds)
        kind = _QUERY_ROUTES.get((method, route))
        if kind is not None:
            self.queries.labels(kind, _outcome(status)).inc()


def _outcome(status: int) -> str:
    if status < 400:
        return "ok"
    return _OUTCOMES.get(status, "error")


class MetricsMiddleware:
    """Times every HTTP request and counts it under its route template (pure ASGI, so that
    streamed responses are timed to their last byte)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.in_flight.dec()
            route = getattr(scope.get("route"), "path", UNMATCHED)
            elapsed = time.perf_counter() - started
            self.metrics.observe(scope["method"], route, status, elapsed)
