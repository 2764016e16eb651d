"""Who may call what: each endpoint names the permission it needs
(:func:`allowed` / :func:`reading`), checked against the request's principal — its API
key, authenticated once per request — and every privileged request is written to the
audit log once it is answered (:class:`AuditMiddleware`), refused ones included.

``Principal`` is what an endpoint gets: its namespace scopes every read and write, its
actor (``<kind>:<name>``) goes into every event the request writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairn.access import Audit, Authenticator, Forbidden
from cairn.access.audit import Entry
from cairn.model.principals import Permission, Principal

# Declared for the OpenAPI document (clients and schemathesis learn the scheme from it);
# the key itself is checked by the Authenticator, which answers in the API's error shape.
bearer = HTTPBearer(
    auto_error=False,
    description="An API key: a principal of one namespace, with a role (docs/access.md).",
)


@dataclass
class AuditDraft:
    """The audit entry of a privileged request, filled in as it goes; written by the
    middleware with the response's status."""

    principal: Principal
    action: str
    target: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None  # why it was refused, before the endpoint ran


def principal_of(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Principal:
    """The request's principal (401 without a valid key). Plain ``def``: a minted key's
    row may be read, so it runs on the thread pool, never the event loop."""
    cached: Principal | None = getattr(request.state, "principal", None)
    if cached is None:
        authenticator: Authenticator = request.app.state.authenticator
        cached = authenticator.principal(request.headers.get("authorization"))
        request.state.principal = cached
    return cached


def allowed(*needs: Permission, action: str) -> Callable[..., Principal]:
    """A dependency: the principal, if it holds every permission of ``needs`` — else
    :class:`Forbidden` (403) — and the request is audited as ``action``."""

    def check(request: Request, who: Annotated[Principal, Depends(principal_of)]) -> Principal:
        return permit(request, who, *needs, action=action)

    return check


def permit(request: Request, who: Principal, *needs: Permission, action: str) -> Principal:
    """What :func:`allowed` checks, for an endpoint whose permission depends on what it
    is asked (a signal: a wait's, or a held node's settlement)."""
    draft = AuditDraft(who, action, target=_target(request))
    request.state.audit = draft
    missing = [need.value for need in needs if not who.may(need)]
    if missing:
        draft.refused = f"a {who.role.value} may not {', '.join(missing)}"
        if Permission.PAYLOADS.value in missing and len(missing) == 1:
            draft.refused = "it may not read payloads"
        raise Forbidden(f"{who.actor} may not {action}: {draft.refused}")
    return who


def reading(request: Request, who: Annotated[Principal, Depends(principal_of)]) -> Principal:
    """A dependency: the principal, if it may read (every role may); not audited."""
    if not who.may(Permission.READ):
        raise Forbidden(f"{who.actor} may not read")
    return who


Reader = Annotated[Principal, Depends(reading)]
Anyone = Annotated[Principal, Depends(principal_of)]


def draft_of(request: Request) -> AuditDraft | None:
    """The audit entry the request is writing, to add what the endpoint knows to it."""
    found: AuditDraft | None = getattr(request.state, "audit", None)
    return found


def _target(request: Request) -> str | None:
    params = request.path_params
    for name in ("run_id", "key_id", "name"):
        if name in params:
            return str(params[name])
    return None


def source_of(scope: Scope) -> str | None:
    """Where a request came from: the peer's address (a proxy's header is a claim, kept
    in the entry's detail, not here)."""
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


class AuditMiddleware:
    """Writes a request's audit entry as it is answered — before the answer leaves, so
    that whoever holds an answer finds its entry: the draft an :func:`allowed` endpoint
    left (``ok`` for 2xx/3xx, ``refused`` for 401/403, ``failed`` else), or — for a 401
    with no principal at all — a throttled ``anonymous`` refusal."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        written = False

        async def write(status: int) -> None:
            nonlocal written
            written = True
            audit: Audit | None = getattr(scope["app"].state, "audit", None)
            if audit is not None:  # (the app has started: it has a store to write to)
                await anyio.to_thread.run_sync(self._write, audit, scope, status)

        async def observe(message: Message) -> None:
            if message["type"] == "http.response.start" and not written:
                await write(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            if not written:  # no answer began: the server answers 500
                await write(500)

    @staticmethod
    def _write(audit: Audit, scope: Scope, status: int) -> None:
        state = scope.get("state") or {}
        draft: AuditDraft | None = state.get("audit")
        source = source_of(scope)
        if draft is None:
            if status == 401:
                audit.refused_anonymous("no valid API key", source, status)
            return
        outcome = "ok" if status < 400 else "refused" if status in (401, 403) else "failed"
        detail = dict(draft.detail)
        if draft.refused is not None:
            detail["refused"] = draft.refused
        forwarded = _header(scope, b"x-forwarded-for")
        if forwarded is not None:
            detail["forwarded_for"] = forwarded[:200]
        detail["path"] = scope.get("path", "")[:300]
        audit.record(
            Entry.by(
                draft.principal,
                draft.action,
                outcome,
                target=draft.target,
                source=source,
                status=status,
                detail=detail,
            )
        )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
