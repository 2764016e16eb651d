"""The FastAPI app: built from one Settings object by :func:`create_app`.

One :class:`~cairn.runtime.Runtime` per API process, built at startup (the database pool,
the Celery publisher, the leases for heartbeats) and closed at shutdown. The API executes
no node: with a broker configured the Celery workers do; in the embedded mode (no
broker, no database URL) nothing else could run what the in-process broker holds, so
this process also starts the worker threads and the scheduler, as ``cairn worker`` does.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from fastapi import APIRouter, FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from cairn import console
from cairn.access import Audit, Authenticator
from cairn.access.authenticate import ConfigKeys
from cairn.access.oidc import OidcSignIn
from cairn.api import (
    admin,
    bulk,
    definitions,
    errors,
    fleet,
    lineage,
    migrations,
    model_calls,
    pauses,
    repair,
    run_views,
    runs,
    schedules,
    stream,
    timeline,
    versions,
)
from cairn.api.access import AuditMiddleware
from cairn.api.limits import BodyLimitMiddleware
from cairn.api.watcher import RunWatcher
from cairn.config import Settings
from cairn.observe.metrics.api import CONTENT_TYPE_LATEST, ApiMetrics, MetricsMiddleware
from cairn.runtime import Runtime

log = logging.getLogger(__name__)

API_VERSION = "1"


def app_from_env() -> FastAPI:
    """The app for ``cairn api`` (uvicorn's factory): settings from ``CAIRN_*``."""
    return create_app(Settings.from_env())


def create_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    """The app. ``runtime``: use this one (tests, embedding) instead of building one at
    startup; the caller then closes it."""
    keys = ConfigKeys.from_settings(settings)  # a bad key file fails here, before serving
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = runtime is None
        app.state.runtime = runtime or await run_in_threadpool(
            partial(Runtime.build, settings, pre_ping=True, resolve=False)
        )
        if owned and app.state.runtime.broker is not None:
            app.state.runtime.start_workers()
            app.state.runtime.start_scheduler()
        app.state.watcher = RunWatcher(app.state.runtime)
        app.state.watcher.start()
        metrics.open_streams.set_function(lambda: app.state.watcher.count)
        store = app.state.runtime.store
        app.state.authenticator = Authenticator(store, keys, cache_s=settings.api_key_cache_s)
        app.state.audit = Audit(store)
        app.state.oidc = OidcSignIn.from_settings(settings)  # None unless CAIRN_OIDC_ISSUER
        if not len(keys):
            log.warning(
                "no bootstrap API keys (CAIRN_API_KEYS): only keys minted with "
                "`cairn keys create` are accepted"
            )
        try:
            yield
        finally:
            await app.state.watcher.close()
            if app.state.oidc is not None:
                app.state.oidc.close()
            if owned:
                await run_in_threadpool(app.state.runtime.close)

    app = FastAPI(
        title="cairn",
        version=API_VERSION,
        description="Submit, follow, signal and cancel durable workflow runs. See docs/api.md.",
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    errors.install(app)
    for module in (runs, run_views, lineage, timeline, repair, bulk, admin, stream):
        app.include_router(module.router)
    for module in (model_calls, schedules, pauses, definitions, fleet, migrations, versions):
        app.include_router(module.router)
    app.include_router(_operations())
    console.install(app, settings)  # the web console, under /console (docs/console.md)
    # The last added is the outermost: metrics see what the body limit refuses too.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.api_max_body_bytes)
    app.add_middleware(AuditMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app


def _operations() -> APIRouter:
    router = APIRouter()

    @router.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        """The process is up and its event loop answers (a liveness probe): nothing else
        is checked, so a database outage does not get every API pod restarted."""
        return {"status": "ok"}

    @router.get("/readyz", include_in_schema=False)
    def readyz(request: Request) -> Response:
        """PostgreSQL answers (a readiness probe): take this pod out of the Service while
        it cannot serve, without restarting it."""
        runtime: Runtime | None = getattr(request.app.state, "runtime", None)
        try:
            if runtime is None:
                raise RuntimeError("starting")
            runtime.store.ping()
        except Exception as exc:  # any failure means: not ready
            log.warning("not ready: %s", exc)
            return errors.error_response(503, "unavailable", "the database cannot be reached")
        return Response('{"status":"ready"}', media_type="application/json")

    @router.get("/metrics", include_in_schema=False)
    def prometheus(request: Request) -> Response:
        return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return router
