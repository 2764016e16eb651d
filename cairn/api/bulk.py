"""``/v1/bulk/*``: one action on every run of the namespace a filter selects — cancel,
signal, fork from the failure. A dry run by default: it counts the runs and answers their
selection token; sent again with ``dry_run: false`` and that token, it acts on exactly
those runs (see :mod:`cairn.operations.bulk`). Each is one request, one audit entry: the
filter, what it selected and what it did."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import Field

from cairn.api.access import Anyone, allowed, draft_of, permit
from cairn.api.deps import Runtime_
from cairn.api.models import Reason, RequestId
from cairn.api.models import Request as Body
from cairn.api.scope import ERRORS
from cairn.api.selection import FilterBody
from cairn.http.models import BulkResult
from cairn.model.awaiting import RECOVERY_SIGNALS
from cairn.model.principals import Permission, Principal
from cairn.operations.bulk import Bulk, BulkOutcome

router = APIRouter(prefix="/v1/bulk")

Canceller = Annotated[
    Principal, Depends(allowed(Permission.BULK, Permission.CANCEL, action="bulk.cancel"))
]
Forker = Annotated[
    Principal, Depends(allowed(Permission.BULK, Permission.FORK, action="bulk.fork"))
]
SignalName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")]
RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"description": "selection_changed: the filter selects other runs than counted."},
    **ERRORS,
}


class BulkRequest(Body):
    filter: FilterBody = Field(default_factory=FilterBody)
    dry_run: bool = Field(default=True, description="Only count (the default); false acts.")
    selection: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        default=None,
        description="The dry run's selection token: act only if the filter still selects "
        "exactly those runs.",
    )
    request_id: RequestId | None = Field(
        default=None,
        description="Idempotency of a signal or a fork: the same id acts once on each run "
        "(default: the selection token).",
    )


class BulkCancel(BulkRequest):
    reason: Reason = "cancelled in bulk through the API"


class BulkSignal(BulkRequest):
    payload: dict[str, Any] | None = None
    comment: Reason | None = None


class BulkFork(BulkRequest):
    patch: dict[str, Any] | None = Field(
        default=None, description="A JSON merge patch (RFC 7386) of each fork's vars."
    )


@router.post("/cancel", response_model=BulkResult, responses=RESPONSES)
def bulk_cancel(
    body: BulkCancel, request: Request, runtime: Runtime_, who: Canceller
) -> BulkResult:
    """Cancel every run the filter selects that has not finished."""
    _asked(request, body)
    found = Bulk(runtime.orchestrator, who).cancel(
        body.filter.to_filter(), body.reason, dry_run=body.dry_run, expect=body.selection
    )
    return _answered(request, found)


@router.post("/signals/{name}", response_model=BulkResult, responses=RESPONSES)
def bulk_signal(
    *, name: SignalName, body: BulkSignal, request: Request, runtime: Runtime_, caller: Anyone
) -> BulkResult:
    """Send signal ``name`` to every waiting run the filter selects (a wait's signal —
    the approve permission, and each wait's approvers; ``recovery.*`` for held nodes —
    the recover permission). A run that cannot take it is listed as refused."""
    settles = name in RECOVERY_SIGNALS
    need = Permission.RECOVER if settles else Permission.APPROVE
    who = permit(request, caller, Permission.BULK, need, action="bulk.signal")
    _asked(request, body, signal=name)
    found = Bulk(runtime.orchestrator, who).signal(
        body.filter.to_filter(),
        name,
        body.payload,
        comment=body.comment,
        dry_run=body.dry_run,
        expect=body.selection,
        request_id=body.request_id,
    )
    return _answered(request, found)


@router.post("/fork", response_model=BulkResult, responses=RESPONSES)
def bulk_fork(body: BulkFork, request: Request, runtime: Runtime_, who: Forker) -> BulkResult:
    """Fork every failed run the filter selects from its failure: a live run from the
    checkpoint where the step that failed it was first dispatched, its vars patched;
    its effects get fresh keys. Asked again (same selection or request_id), it starts
    no second fork of a run."""
    _asked(request, body)
    found = Bulk(runtime.orchestrator, who).fork_from_failure(
        body.filter.to_filter(),
        body.patch,
        dry_run=body.dry_run,
        expect=body.selection,
        request_id=body.request_id,
    )
    return _answered(request, found)


def _asked(request: Request, body: BulkRequest, **more: Any) -> None:
    """The audit entry says what was asked, whatever comes of it."""
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(
            filter=body.filter.model_dump(exclude_defaults=True), dry_run=body.dry_run, **more
        )


def _answered(request: Request, found: BulkOutcome) -> BulkResult:
    """... and what came of it: the runs selected (their token), and those acted on."""
    draft = draft_of(request)
    if draft is not None:
        draft.target = found.selection
        draft.detail.update(
            matched=found.matched,
            done=[entry["run_id"] for entry in found.done],
            refused=len(found.refused),
        )
    return BulkResult(**found.to_dict())
