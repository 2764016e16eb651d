"""``cairn api``: the HTTP API on uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.cli import remote
from cairn.cli._app import app, cwd_importable


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
) -> None:
    """Serve the HTTP API (docs/api.md): submit, read, stream, signal and cancel runs.
    One process per replica; scale with replicas, not with uvicorn workers, so that each
    process keeps one database pool."""
    from cairn.config import Settings
    from cairn.observe.logs import configure_logging

    remote.process_note("api")
    cwd_importable()  # the embedded mode runs handlers in this process
    import uvicorn

    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format, "api")
    uvicorn.run(
        # By name: the command line stands beside the API, it does not import it.
        "cairn.api.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        # Its lines through cairn's setup (CAIRN_LOG_FORMAT), not uvicorn's own.
        log_config=None,
        # Behind a load balancer the client address comes from X-Forwarded-For; trusted
        # from loopback only by default (FORWARDED_ALLOW_IPS widens it).
        proxy_headers=True,
        access_log=False,  # /metrics counts requests; a line per request is too much
        timeout_graceful_shutdown=10,
    )
