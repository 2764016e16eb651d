"""The web console, served by ``cairn api`` under ``/console``: server-rendered pages (one
per question), signed in with an API key (:mod:`cairn.console.auth`) into a server-side
session (:mod:`cairn.console.sessions`). Every read and every action calls the HTTP API's
own functions with the signed-in principal, so the same permission checks, payload
hiding and audit apply. See docs/console.md.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from cairn.config import Settings
from cairn.console import actions, auth, bulk, fleet, forks, live, oidc, pages, run_page
from cairn.console.web import HERE, PREFIX, SecurityHeaders


def install(app: FastAPI, settings: Settings) -> None:
    """Mount the console's pages and assets on ``app`` (``create_app`` calls it)."""
    app.state.console_session_s = settings.console_session_s
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="console-static")
    for module in (auth, oidc, pages, run_page, actions, forks, bulk, live, fleet):
        app.include_router(module.router, include_in_schema=False)
    app.add_middleware(SecurityHeaders)


__all__ = ["install"]
