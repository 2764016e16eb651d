"""What an admin of a namespace manages over HTTP: its principals and their API keys
(``/v1/principals``, ``/v1/keys``), and its audit log (``/v1/audit``, JSON pages or JSON
lines to export). Every call is itself audited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from cairn.access import Authenticator, KeyManager
from cairn.access.keys import NAME
from cairn.api.access import allowed, draft_of
from cairn.api.deps import Runtime_
from cairn.api.models import MintRequest, PrincipalRequest, RotateRequest
from cairn.http.models import AuditPage, KeyList, KeyView, MintedKeyView, PrincipalView
from cairn.model.principals import Permission, Principal, Role
from cairn.store.access import AuditRecord, KeyRecord, PrincipalRecord

router = APIRouter(prefix="/v1")

KeyAdmin = Annotated[Principal, Depends(allowed(Permission.KEYS, action="keys.read"))]
PrincipalCreator = Annotated[
    Principal, Depends(allowed(Permission.KEYS, action="principal.create"))
]
KeyCreator = Annotated[Principal, Depends(allowed(Permission.KEYS, action="key.create"))]
KeyRotator = Annotated[Principal, Depends(allowed(Permission.KEYS, action="key.rotate"))]
KeyRevoker = Annotated[Principal, Depends(allowed(Permission.KEYS, action="key.revoke"))]
AuditReader = Annotated[Principal, Depends(allowed(Permission.AUDIT, action="audit.read"))]
PrincipalName = Annotated[str, Path(min_length=1, max_length=200, pattern=NAME.pattern)]
KeyId = Annotated[str, Path(min_length=1, max_length=40, pattern=r"^[a-z2-7]{12}$")]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or a wrong one."},
    403: {"description": "Only an admin may (docs/access.md)."},
    422: {"description": "A field is missing, unknown or of the wrong type (named)."},
}
AUDIT_PAGE_MAX = 1000


def _keys(runtime: Any) -> KeyManager:
    return KeyManager(runtime.store)


def _note(request: Request, **detail: Any) -> None:
    """Add to the request's audit entry."""
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(detail)


def _principal_view(record: PrincipalRecord) -> PrincipalView:
    return PrincipalView(
        name=record.name,
        role=record.role,
        payloads=record.payloads,
        kind=record.kind,
        created_at=record.created_at,
        created_by=record.created_by,
    )


def _key_view(record: KeyRecord) -> KeyView:
    return KeyView(
        key_id=record.id,
        principal=record.principal.name,
        role=record.principal.role,
        payloads=record.principal.payloads,
        created_at=record.created_at,
        expires_at=record.expires_at,
        revoked_at=record.revoked_at,
    )


@router.post("/principals", status_code=201, response_model=PrincipalView, responses=ERRORS)
def create_principal(
    body: PrincipalRequest, request: Request, runtime: Runtime_, who: PrincipalCreator
) -> PrincipalView:
    """A new principal of the admin's namespace (then mint it a key). 409 if the name is
    taken."""
    _note(request, name=body.name, role=body.role, payloads=body.payloads)
    created = _keys(runtime).create_principal(
        who.namespace, body.name, Role(body.role), payloads=body.payloads, by=who
    )
    return _principal_view(created)


@router.post(
    "/principals/{name}/keys", status_code=201, response_model=MintedKeyView, responses=ERRORS
)
def mint_key(
    name: PrincipalName,
    request: Request,
    runtime: Runtime_,
    who: KeyCreator,
    body: MintRequest | None = None,
) -> MintedKeyView:
    """A new API key for the principal: its whole text is in this answer only (cairn
    keeps its digest)."""
    body = body or MintRequest()
    expires = None if body.expires_in_s is None else timedelta(seconds=body.expires_in_s)
    minted = _keys(runtime).mint(who.namespace, name, expires_in=expires)
    _note(request, key_id=minted.key_id)
    return MintedKeyView(**minted.__dict__)


@router.get("/keys", response_model=KeyList, responses=ERRORS)
def list_keys(runtime: Runtime_, who: KeyAdmin) -> KeyList:
    """The namespace's principals and their keys (ids, never secrets), revoked ones too."""
    records = _keys(runtime).keys(who.namespace)
    with runtime.store.reading() as tx:
        principals = tx.principals_of(who.namespace)
    return KeyList(
        principals=[_principal_view(p) for p in principals],
        keys=[_key_view(r) for r in records],
    )


@router.post("/keys/{key_id}/rotate", status_code=201, response_model=MintedKeyView)
def rotate_key(
    key_id: KeyId,
    request: Request,
    runtime: Runtime_,
    who: KeyRotator,
    body: RotateRequest | None = None,
) -> MintedKeyView:
    """A new key for the same principal; this one keeps working for ``grace_s``, then
    not."""
    body = body or RotateRequest()
    minted = _keys(runtime).rotate(who.namespace, key_id, grace=timedelta(seconds=body.grace_s))
    _forget(request, key_id)
    _note(request, new_key_id=minted.key_id, grace_s=body.grace_s)
    return MintedKeyView(**minted.__dict__)


@router.delete("/keys/{key_id}", status_code=204, responses=ERRORS)
def revoke_key(key_id: KeyId, request: Request, runtime: Runtime_, who: KeyRevoker) -> Response:
    """The key stops working (every API process, within CAIRN_API_KEY_CACHE_S)."""
    _keys(runtime).revoke(who.namespace, key_id)
    _forget(request, key_id)
    return Response(status_code=204)


def _forget(request: Request, key_id: str) -> None:
    authenticator: Authenticator = request.app.state.authenticator
    authenticator.forget(key_id)


@router.get("/audit", response_model=AuditPage, responses=ERRORS)
def read_audit(
    *,
    runtime: Runtime_,
    who: AuditReader,
    after: Annotated[int, Query(ge=0, description="Entries after this id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=AUDIT_PAGE_MAX)] = 100,
    since: Annotated[datetime | None, Query(description="From this time (ISO 8601).")] = None,
    until: Annotated[datetime | None, Query(description="Before this time.")] = None,
    actor: Annotated[str | None, Query(max_length=300)] = None,
    action: Annotated[str | None, Query(max_length=100)] = None,
    outcome: Annotated[str | None, Query(pattern="^(ok|refused|failed)$")] = None,
    export: Annotated[bool, Query(description="All of it as JSON lines (a download).")] = False,
) -> Any:
    """The namespace's audit log, oldest first, a page at a time (``next_after``); with
    ``export``, every matching entry as JSON lines."""
    filters = {
        name: value
        for name, value in (("actor", actor), ("action", action), ("outcome", outcome))
        if value is not None
    }
    read = _AuditRead(runtime, who.namespace, since, until, filters)
    if export:
        return StreamingResponse(
            read.lines(after),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": 'attachment; filename="cairn-audit.jsonl"'},
        )
    entries = read.page(after, limit)
    return AuditPage(
        entries=[entry.to_dict() for entry in entries],
        next_after=entries[-1].id if entries else after,
    )


class _AuditRead:
    def __init__(
        self,
        runtime: Any,
        namespace: str,
        since: datetime | None,
        until: datetime | None,
        filters: dict[str, str],
    ) -> None:
        self.runtime, self.namespace = runtime, namespace
        self.since, self.until, self.filters = since, until, filters

    def page(self, after: int, limit: int) -> list[AuditRecord]:
        with self.runtime.store.reading() as tx:
            found: list[AuditRecord] = tx.audit_entries(
                self.namespace,
                after=after,
                limit=limit,
                since=self.since,
                until=self.until,
                filters=self.filters,
            )
        return found

    def lines(self, after: int) -> Iterator[str]:
        while entries := self.page(after, AUDIT_PAGE_MAX):
            for entry in entries:
                yield json.dumps(entry.to_dict(), separators=(",", ":")) + "\n"
            after = entries[-1].id
