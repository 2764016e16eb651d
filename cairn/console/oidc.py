"""Signing in to the console through OpenID Connect (docs/console.md#openid-connect-sign-in).

``/console/oidc/login`` begins a login (:class:`~cairn.access.oidc.OidcSignIn`): its
secrets (state, nonce, PKCE verifier) are kept in the database under the digest of a
random value the browser holds in an HTTP-only cookie scoped to ``/console/oidc``, and
the browser is sent to the identity provider. ``/console/oidc/callback`` takes that login
— once: a second callback, or one from another browser, finds none — lets the relying
party verify what the provider sent back, and starts a session for the person it names
(:func:`~cairn.console.sessions.start_session`). Every outcome is audited (``auth.oidc``).
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from cairn.access.oidc import (
    LoginState,
    OidcSignIn,
    ProviderUnavailable,
    SignInRefused,
    record_sign_in,
)
from cairn.access.oidc.flow import LOGIN_TTL_S
from cairn.console.auth import sign_in_form
from cairn.console.sessions import digest, start_session
from cairn.console.web import (
    PREFIX,
    ConsoleRoute,
    Runtime_,
    is_https,
    see_other,
    set_session_cookie,
)

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)

LOGIN_COOKIE = "cairn_oidc_login"
LOGIN_PATH = f"{PREFIX}/oidc"


def _sign_in(request: Request) -> OidcSignIn | None:
    found: OidcSignIn | None = getattr(request.app.state, "oidc", None)
    return found


def _refused(request: Request, message: str, status: int) -> Response:
    page = sign_in_form(request, None, message, status)
    page.delete_cookie(LOGIN_COOKIE, path=LOGIN_PATH)
    return page


@router.get("/oidc/login")
def oidc_login(
    request: Request,
    runtime: Runtime_,
    login_hint: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    """Leave for the identity provider, a login begun and its secrets kept here."""
    oidc = _sign_in(request)
    if oidc is None:
        return _refused(request, "Sign-in through an identity provider is not set up.", 404)
    try:
        begun = oidc.begin(login_hint=login_hint)
    except ProviderUnavailable as away:
        return _refused(request, f"The identity provider cannot be reached: {away}", 503)
    token = secrets.token_urlsafe(32)
    with runtime.store.transaction() as tx:
        tx.add_login(digest(token), begun.login.to_dict(), LOGIN_TTL_S)
    response = RedirectResponse(begun.url, status_code=303)
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=int(LOGIN_TTL_S),
        path=LOGIN_PATH,
        httponly=True,
        samesite="lax",  # it must come back with the provider's redirect
        secure=is_https(request),
    )
    return response


@router.get("/oidc/callback")
def oidc_callback(request: Request, runtime: Runtime_) -> Response:
    """Back from the identity provider: the person it vouches for is signed in, or told
    why not (and the refusal is in the audit log)."""
    oidc = _sign_in(request)
    if oidc is None:
        return _refused(request, "Sign-in through an identity provider is not set up.", 404)
    token = request.cookies.get(LOGIN_COOKIE)
    kept = None
    if token and len(token) <= 200:
        with runtime.store.transaction() as tx:
            kept = tx.take_login(digest(token))
    source = request.client.host if request.client else None
    audit = request.app.state.audit
    try:
        signed_in = oidc.finish(dict(request.query_params), LoginState.from_dict(kept or {}))
    except SignInRefused as refused:
        record_sign_in(audit, refused, source)
        return _refused(request, f"Sign-in refused: {refused}", 403)
    except ProviderUnavailable as away:
        return _refused(request, f"The identity provider cannot be reached: {away}", 503)
    record_sign_in(audit, signed_in, source)
    lifetime = request.app.state.console_session_s
    session = start_session(runtime.store, signed_in.principal, lifetime)
    response = see_other(PREFIX + "/")
    set_session_cookie(request, response, session)
    response.delete_cookie(LOGIN_COOKIE, path=LOGIN_PATH)
    return response
