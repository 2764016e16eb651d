"""``/v1/runs``, written: submit (one or a batch), signals, cancel, a live fork.

Endpoints are plain ``def``: FastAPI runs them on its thread pool, so the synchronous
orchestrator never blocks the event loop. Every run is looked up within the caller's
namespace; a run of another namespace is "not found", exactly like a missing one, so a
key cannot even learn that another tenant's run exists. Each endpoint names the
permission it needs (docs/access.md); what it writes carries the caller's principal as
its actor, and a caller that may not read payloads gets a run without them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Request, Response

from cairn.api.access import Anyone, allowed, draft_of, permit
from cairn.api.deps import Runtime_, storable
from cairn.api.models import (
    BatchItem,
    BatchRequest,
    CancelRequest,
    ForkRequest,
    SignalRequest,
    SubmitRequest,
)
from cairn.api.scope import ERRORS, RunId, head_in, status_url
from cairn.engine import batches
from cairn.engine.batches import SubmitItem
from cairn.errors import IdempotencyConflict, InvalidInput
from cairn.http.models import (
    BatchResponse,
    BatchResult,
    CancelResult,
    Forked,
    SignalResult,
    Submitted,
)
from cairn.model.awaiting import RECOVERY_SIGNALS
from cairn.model.principals import Permission, Principal
from cairn.model.starts import Debounce, Singleton
from cairn.model.workflow_names import WorkflowName
from cairn.runtime import Runtime
from cairn.store.records import (
    RequestedRun,
    RunRecord,
)
from cairn.timetravel.fork import fork_live, fork_point

router = APIRouter(prefix="/v1")

IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=200,
        description="Request-level idempotency: the same key and body return the same run; "
        "the same key with another body is refused (409).",
    ),
]
Submitter = Annotated[Principal, Depends(allowed(Permission.SUBMIT, action="run.submit"))]
BatchSubmitter = Annotated[
    Principal, Depends(allowed(Permission.SUBMIT, action="run.submit_batch"))
]
Canceller = Annotated[Principal, Depends(allowed(Permission.CANCEL, action="run.cancel"))]
Forker = Annotated[Principal, Depends(allowed(Permission.FORK, action="run.fork"))]


# -- submit -----------------------------------------------------------------------------


@router.post(
    "/runs",
    status_code=202,
    response_model=Submitted,
    responses={
        200: {"model": Submitted, "description": "The run this Idempotency-Key started."},
        409: {"description": "The Idempotency-Key was used with another request."},
        **ERRORS,
    },
)
def submit_run(
    *,
    body: SubmitRequest,
    request: Request,
    response: Response,
    runtime: Runtime_,
    who: Submitter,
    idempotency_key: IdempotencyKey = None,
) -> Submitted:
    """Start a run; 202 with its id at once (the run goes on in the background)."""
    metrics = request.app.state.metrics
    namespace = who.namespace
    key = storable(idempotency_key, "Idempotency-Key")
    if key is not None:
        existing = _by_request(runtime, namespace, key)
        if existing is not None:
            _same_request(existing, body, key)
            metrics.submitted.labels("single", "existing").inc()
            response.status_code = 200
            return _submitted(request, response, str(existing.id))
    try:
        run_id = runtime.orchestrator.submit(
            body.workflow,
            body.input,
            request_id=key,
            namespace=namespace,
            version=body.version,
            webhook=body.webhook,
            debounce=None if body.debounce is None else Debounce.of(body.debounce.model_dump()),
            singleton=None if body.singleton is None else Singleton.of(body.singleton.model_dump()),
            priority=body.priority,
            actor=who.actor,
        )
    except Exception:
        metrics.submitted.labels("single", "refused").inc()
        raise
    if key is not None:
        # Two requests with one key may both have found nothing above; the one whose
        # insert lost got the winner's run back and must compare bodies too.
        winner = _by_request(runtime, namespace, key)
        assert winner is not None
        _same_request(winner, body, key)
    metrics.submitted.labels("single", "created").inc()
    return _submitted(request, response, run_id)


@router.post(
    "/runs:batch",
    response_model=BatchResponse,
    responses={413: {"description": "The body is over CAIRN_API_MAX_BODY_BYTES."}, **ERRORS},
)
def submit_batch(
    body: BatchRequest, request: Request, runtime: Runtime_, who: BatchSubmitter
) -> BatchResponse:
    """Start up to 1,000 runs in one transaction. Each item is answered on its own (by
    index): the run it started, the run its ``request_id`` already had (``created``
    false; a different workflow or input under a taken request id is refused as an
    ``idempotency_conflict``), or the error that refused it."""
    answers: dict[int, BatchResult] = {}
    # Request ids already taken (before, or by an earlier item of this batch) are
    # answered here — a taken id with another workflow or input is a conflict, which
    # only the row can tell — and only fresh items go to the orchestrator, which answers
    # an id taken meanwhile (a concurrent submit) with the run that took it.
    fresh, later = _sorted_items(runtime, who.namespace, body, answers)
    items = [
        SubmitItem(
            item.workflow, item.input, item.request_id, item.version, item.webhook, item.priority
        )
        for item in (body.runs[index] for index in fresh)
    ]
    submitted = (
        runtime.orchestrator.submit_batch(items, namespace=who.namespace, actor=who.actor)
        if items
        else []
    )
    for answer in submitted:
        index = fresh[answer.index]
        answers[index] = _answered(runtime, index, answer, body.runs[index])
    for index, first in later:
        first_answer = answers[first]
        if first_answer.run_id is None:
            answers[index] = BatchResult(index=index, error=first_answer.error)
        elif not _same_item(body.runs[first], body.runs[index]):
            answers[index] = _conflict(index, body.runs[index].request_id, first_answer.run_id)
        else:
            answers[index] = first_answer.model_copy(update={"index": index, "created": False})
    results = [answers[index] for index in range(len(body.runs))]
    created = sum(1 for r in results if r.created)
    existing = sum(1 for r in results if r.created is False)
    refused = len(results) - created - existing
    metrics = request.app.state.metrics
    for outcome, count in (("created", created), ("existing", existing), ("refused", refused)):
        if count:
            metrics.submitted.labels("batch", outcome).inc(count)
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(created=created, existing=existing, refused=refused)
    return BatchResponse(created=created, existing=existing, refused=refused, results=results)


def _sorted_items(
    runtime: Runtime, namespace: str, body: BatchRequest, answers: dict[int, BatchResult]
) -> tuple[list[int], list[tuple[int, int]]]:
    """The indexes of the fresh items, and of those whose request id an earlier item of
    the batch has (each with that item's index); items whose request id is taken
    already are answered in ``answers``."""
    request_ids = [item.request_id for item in body.runs if item.request_id is not None]
    with runtime.store.reading() as tx:
        taken = {row.request_id: row for row in tx.runs_by_requests(namespace, request_ids)}
    first_of: dict[str, int] = {}
    fresh: list[int] = []
    later: list[tuple[int, int]] = []
    for index, item in enumerate(body.runs):
        rid = item.request_id
        if rid is not None and rid in taken:
            answers[index] = _existing(index, taken[rid], item)
        elif rid is not None and rid in first_of:
            later.append((index, first_of[rid]))
        else:
            if rid is not None:
                first_of[rid] = index
            fresh.append(index)
    return fresh, later


def _answered(
    runtime: Runtime, index: int, answer: batches.Submitted, item: BatchItem
) -> BatchResult:
    """The result of a fresh item, as the orchestrator answered it."""
    if answer.run_id is None:
        return BatchResult(
            index=index, error={"code": str(answer.error_code), "message": str(answer.error)}
        )
    if answer.created:
        return BatchResult(
            index=index, run_id=answer.run_id, status_url=status_url(answer.run_id), created=True
        )
    row = _run(runtime, answer.run_id)  # taken by a concurrent request since the read
    return (
        _existing(index, row, item)
        if row is not None
        else _taken(index, answer.run_id)  # and deleted since (retention)
    )


def _existing(index: int, row: RequestedRun | RunRecord, item: BatchItem) -> BatchResult:
    if not _matches(row, item):
        return _conflict(index, item.request_id, row.id)
    return _taken(index, row.id)


def _taken(index: int, run_id: str) -> BatchResult:
    return BatchResult(index=index, run_id=run_id, status_url=status_url(run_id), created=False)


def _conflict(index: int, request_id: str | None, run_id: str) -> BatchResult:
    conflict = IdempotencyConflict(
        f"request id {request_id!r} started another run ({run_id}) with a different "
        "workflow or input"
    )
    return BatchResult(index=index, error={"code": conflict.code, "message": str(conflict)})


def _submitted(request: Request, response: Response, run_id: str) -> Submitted:
    response.headers["Location"] = status_url(run_id)
    draft = draft_of(request)
    if draft is not None:
        draft.target = run_id
    return Submitted(run_id=run_id, status_url=status_url(run_id))


def _by_request(runtime: Runtime, namespace: str, request_id: str) -> RunRecord | None:
    with runtime.store.reading() as tx:
        return tx.run_by_request(namespace, request_id)


def _run(runtime: Runtime, run_id: str) -> RunRecord | None:
    with runtime.store.reading() as tx:
        return tx.run(run_id)


def _matches(row: RequestedRun | RunRecord, body: SubmitRequest | BatchItem) -> bool:
    """Is the run ``row`` what this request asks for? Inputs compare as canonical JSON,
    so 1 and true (equal in Python) are different requests, as they are to a handler."""
    return bool(
        _names(row, body.workflow, body.version)
        and _canonical(row.input) == _canonical(body.input)
        and row.webhook_url == _webhook(body)
    )


def _names(row: RequestedRun | RunRecord, written: str, version: int | None) -> bool:
    """Does ``written`` (``[namespace/]workflow[@version]``) name the run's workflow? A
    bare name was resolved to the run's owner when it started; a name that does not
    parse names nothing."""
    try:
        wanted = WorkflowName.parse(written).pinned(version)
    except InvalidInput:
        return False
    return (
        wanted.name == row.workflow
        and wanted.namespace in (None, row.workflow_namespace)
        and wanted.version in (None, row.version)
    )


def _same_item(first: BatchItem, later: BatchItem) -> bool:
    """Does a batch's later item with an earlier one's request id ask for the same run?"""
    return bool(
        first.workflow == later.workflow
        and first.version == later.version
        and _canonical(first.input) == _canonical(later.input)
        and _webhook(first) == _webhook(later)
    )


def _webhook(body: SubmitRequest | BatchItem) -> str | None:
    return body.webhook.strip() if body.webhook else None


def _same_request(row: RunRecord, body: SubmitRequest, key: str) -> None:
    if not _matches(row, body):
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was used for another request (run {row.id}, "
            f"workflow {row.workflow}); use a new key for a new request"
        )


def _canonical(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# -- acting on a run --------------------------------------------------------------------


@router.post(
    "/runs/{run_id}/signals/{name}",
    response_model=SignalResult,
    responses={409: {"description": "The run cannot take this signal now."}, **ERRORS},
)
def send_signal(
    *,
    run_id: RunId,
    name: Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")],
    request: Request,
    runtime: Runtime_,
    caller: Anyone,
    body: SignalRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> SignalResult:
    """Send a signal to a waiting run (a wait's signal — the approve permission;
    ``recovery.retry``, ``recovery.complete``, ``recovery.fail`` for a held node — the
    recover permission). Applied at once, its actor the caller's principal; the same
    ``signal_id`` (or Idempotency-Key) twice is applied once. A signal the run cannot
    take (not waiting, not declared, already decided) is refused with 409 and its code."""
    settles = name in RECOVERY_SIGNALS
    need = Permission.RECOVER if settles else Permission.APPROVE
    who = permit(request, caller, need, action="run.recover" if settles else "run.signal")
    draft = draft_of(request)
    if draft is not None:
        draft.detail["signal"] = name
    head_in(runtime, run_id, who.namespace)
    body = body or SignalRequest()
    decision = runtime.orchestrator.signal(
        run_id,
        name,
        body.payload,
        actor=who.actor,
        signal_id=body.signal_id or storable(idempotency_key, "Idempotency-Key"),
        node=body.node,
        comment=body.comment,
        role=who.role.value,
    )
    return SignalResult(
        run_id=run_id, applied=decision.ignored is None, status=decision.state.status.value
    )


@router.post(
    "/runs/{run_id}/cancel",
    status_code=202,
    response_model=CancelResult,
    responses={409: {"description": "The run has finished already."}, **ERRORS},
)
def cancel_run(
    run_id: RunId, runtime: Runtime_, who: Canceller, body: CancelRequest | None = None
) -> CancelResult:
    """Cancel a run: it moves to ``cancelling`` at once and ends ``cancelled`` once its
    running nodes have stopped (see docs/failures.md). 409 for a finished run."""
    head_in(runtime, run_id, who.namespace)
    body = body or CancelRequest()
    decision = runtime.orchestrator.cancel(run_id, body.reason, actor=who.actor)
    return CancelResult(
        run_id=run_id, changed=decision.ignored is None, status=decision.state.status.value
    )


@router.post(
    "/runs/{run_id}/fork",
    status_code=202,
    response_model=Forked,
    responses={409: {"description": "Not confirmed."}, **ERRORS},
)
def fork_run(
    *,
    run_id: RunId,
    body: ForkRequest,
    request: Request,
    response: Response,
    runtime: Runtime_,
    who: Forker,
) -> Forked:
    """Start a live fork: a new run of this namespace from the run's checkpoint after
    ``at_seq``, its vars patched, linked to it (``parent_run_id``, ``fork_seq``); its
    effects get fresh keys (docs/time-travel.md). 409 unless ``confirm`` is true; 422 if
    ``at_seq`` is not a checkpoint."""
    head_in(runtime, run_id, who.namespace)
    point = fork_point(runtime.orchestrator, run_id, body.at_seq, body.patch)
    fork_id = fork_live(runtime.orchestrator, point, confirm=body.confirm, actor=who.actor)
    response.headers["Location"] = status_url(fork_id)
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(fork=fork_id, at_seq=body.at_seq)
    return Forked(
        run_id=fork_id, status_url=status_url(fork_id), parent_run_id=run_id, fork_seq=body.at_seq
    )
