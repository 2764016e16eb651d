"""What every console page shares: the templates, the signed-in principal (from the
session cookie, made the request's principal so that the API's own checks and audit see
it), the CSRF check of every form, HTML error pages, and the security headers of every
answer under ``/console``."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairn.api.errors import status_of
from cairn.console.sessions import COOKIE, Session, find_session, same
from cairn.errors import CairnError, Forbidden
from cairn.model.principals import Permission, Principal
from cairn.runtime import Runtime

HERE = Path(__file__).parent
PREFIX = "/console"
MAX_FORM_BYTES = 256 * 1024

# No inline script or style, nothing from another origin; the pages' one script follows
# the run's stream on this origin (connect-src 'self').
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)

templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))


def _ago(epoch: float | None) -> str:
    if epoch is None:
        return ""
    seconds = max(0, int(time.time() - epoch))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


templates.policies["json.dumps_kwargs"] = {"sort_keys": True, "default": str}
templates.filters["when"] = _when
templates.filters["ago"] = _ago


class SignIn(Exception):
    """No live session: the browser is sent to the sign-in page."""


class SecurityHeaders:
    """Every answer under ``/console`` — pages, assets, errors, redirects — carries the
    CSP, frame, sniffing and referrer headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = [*kept, *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    session: Session | None = getattr(request.state, "session", None)
    who = session.principal if session is not None else None
    page = templates.get_template(template).render(
        session=session,
        who=who,
        may=(lambda need: who is not None and who.may(Permission(need))),
        prefix=PREFIX,
        request=request,
        **context,
    )
    return HTMLResponse(page, status_code=status)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", status=status, status_code=status, message=message)


class ConsoleRoute(APIRoute):
    """A console route: errors become HTML pages with the API's status for them (403 for
    a permission the principal lacks, 404 for a run it may not see, ...); no session
    sends the browser to sign in."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except SignIn:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{PREFIX}/sign-in?next={quote(target)}", 303)
            except CairnError as exc:
                return error_page(request, status_of(exc), str(exc))
            except RequestValidationError as exc:
                fields = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg')}"
                    for e in exc.errors()
                )
                return error_page(request, 422, f"not a valid request: {fields}")
            except HTTPException as exc:
                return error_page(request, exc.status_code, str(exc.detail))

        return handle


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def session_of(request: Request) -> Session:
    """The request's live session, else :class:`SignIn`. Its principal becomes the
    request's principal: the API's checks (:func:`cairn.api.access.permit`) and its
    audit middleware see the signed-in principal as the actor."""
    found: Session | None = getattr(request.state, "session", None)
    if found is None:
        runtime = runtime_of(request)
        found = find_session(
            runtime.store, request.app.state.authenticator, request.cookies.get(COOKIE)
        )
        if found is None:
            raise SignIn()
        request.state.session = found
        request.state.principal = found.principal
    return found


def signed_in(request: Request) -> Principal:
    return session_of(request).principal


Who = Annotated[Principal, Depends(signed_in)]
Runtime_ = Annotated[Runtime, Depends(runtime_of)]


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the console's forms send nothing
    else), the last value of each field."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise HTTPException(413, "the form is too large")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


async def checked_form(request: Request, _who: Who) -> dict[str, str]:
    """A signed-in form post: its fields, if its CSRF token is the session's; else 403,
    before anything is read or written. (``_who``: the session, found on the thread
    pool before this runs on the event loop.)"""
    session = session_of(request)
    form = await read_form(request)
    if not same(form.get("csrf"), session.csrf):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and retry")
    return form


Form = Annotated[Mapping[str, str], Depends(checked_form)]


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session_cookie(request: Request, response: Response, session: Session) -> None:
    max_age = max(1, int(session.expires_at - time.time()))
    response.set_cookie(
        COOKIE,
        session.token,
        max_age=max_age,
        path=PREFIX,
        httponly=True,
        samesite="lax",
        secure=is_https(request),
    )


def see_other(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


def as_api(request: Request, who: Principal, guard: Any) -> Principal:
    """Run the dependency an API endpoint is guarded with (``runs.Canceller``, ...): its
    permission check, and its audit entry, for ``who``."""
    check = guard.__metadata__[0].dependency
    checked: Principal = check(request, who)
    return checked
