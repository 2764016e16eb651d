"""Signing in to the console with an API key, and out.

The key is checked by the API's own :class:`~cairn.access.Authenticator` (a minted key or
a bootstrap key): it becomes the session's principal, and is not kept — the session is.
A wrong key answers 401 (the audit log records the refusal as the API does); a right
one is audited as ``console.sign_in`` by that principal.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from cairn.access import Unauthorized
from cairn.api.access import AuditDraft
from cairn.console.sessions import COOKIE, PRE_COOKIE, end_session, same, start_session
from cairn.console.web import (
    PREFIX,
    ConsoleRoute,
    Form,
    Runtime_,
    read_form,
    render,
    see_other,
    session_of,
    set_session_cookie,
)
from cairn.errors import Forbidden

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)


def _next(target: str | None) -> str:
    """Where to go once signed in: a console path only (never another site)."""
    if target and target.startswith(PREFIX + "/") and not target.startswith("//"):
        return target
    return PREFIX + "/"


def sign_in_form(request: Request, target: str | None, error: str | None, status: int) -> Response:
    """The sign-in page: an API key's form, and the identity provider's link if set up."""
    token = request.cookies.get(PRE_COOKIE) or secrets.token_urlsafe(24)
    page = render(
        request,
        "sign_in.html",
        status=status,
        next=_next(target),
        csrf=token,
        error=error,
        oidc=getattr(request.app.state, "oidc", None) is not None,
    )
    page.set_cookie(PRE_COOKIE, token, path=PREFIX, httponly=True, samesite="strict")
    return page


@router.get("/sign-in")
def sign_in_page(
    request: Request, next: Annotated[str | None, Query(max_length=500)] = None
) -> Response:
    """The sign-in form (an API key)."""
    return sign_in_form(request, next, None, 200)


@router.post("/sign-in")
async def sign_in(request: Request, runtime: Runtime_) -> Response:
    form = await read_form(request)
    expected = request.cookies.get(PRE_COOKIE)
    if expected is None or not same(form.get("csrf"), expected):
        raise Forbidden("the sign-in form's CSRF token is missing or wrong: reload the page")
    target = form.get("next")
    authenticator = request.app.state.authenticator
    try:
        who = await run_in_threadpool(authenticator.principal, f"Bearer {form.get('key', '')}")
    except Unauthorized:
        return sign_in_form(request, target, "That API key is not valid.", 401)
    lifetime = request.app.state.console_session_s
    session = await run_in_threadpool(start_session, runtime.store, who, lifetime)
    request.state.audit = AuditDraft(who, "console.sign_in")
    response = see_other(_next(target))
    set_session_cookie(request, response, session)
    response.delete_cookie(PRE_COOKIE, path=PREFIX)
    return response


@router.post("/sign-out")
def sign_out(request: Request, runtime: Runtime_, _form: Form) -> Response:
    """End the session (its row is deleted) and forget the cookie."""
    session = session_of(request)
    end_session(runtime.store, session.token)
    request.state.audit = AuditDraft(session.principal, "console.sign_out")
    response = see_other(f"{PREFIX}/sign-in")
    response.delete_cookie(COOKIE, path=PREFIX)
    return response
