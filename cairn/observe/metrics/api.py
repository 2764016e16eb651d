"""Prometheus metrics of the API process: requests by route and status, their latency,
and runs submitted.

Each app has its own registry (no import-time global): two apps in one process (tests)
do not share counters, and ``/metrics`` shows this process's API only.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Requests are mostly one or two queries; the upper buckets catch a database that stalls.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNMATCHED = "(unmatched)"  # one label for every unknown path: probes must not grow the series

__all__ = ["CONTENT_TYPE_LATEST", "ApiMetrics", "MetricsMiddleware"]


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "cairn_api_requests",
            "HTTP requests answered, by route template, method and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "cairn_api_request_duration_seconds",
            "Time to answer an HTTP request (to the end of the body; a stream's whole life).",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.submitted = Counter(
            "cairn_api_runs_submitted",
            "Runs asked for through the API: created, existing (same idempotency key or "
            "request id) or refused, by kind (single, batch).",
            ["kind", "outcome"],
            registry=self.registry,
        )

        self.open_streams = Gauge(
            "cairn_api_streams_open",
            "Run streams (GET /v1/runs/{id}/stream) open on this process: each one a watch "
            "on its run, none a thread.",
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts every HTTP request once it is answered, labelled by its route *template*
    (``/v1/runs/{run_id}``), never the raw path: run ids would make a series each."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # if the app raises before it answers, the server answers 500

        async def observe(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)
