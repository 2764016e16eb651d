"""``/v1/runs``: submit (one or a batch), read, list, events, signals, cancel, artifacts.

Endpoints are plain ``def``: FastAPI runs them on its thread pool, so the synchronous
orchestrator never blocks the event loop. Every run is looked up within the caller's
namespace; a run of another namespace is "not found", exactly like a missing one, so a
key cannot even learn that another tenant's run exists. Each endpoint names the
permission it needs (docs/access.md); what it writes carries the caller's principal as
its actor, and a caller that may not read payloads gets a run without them.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from cairn.api.access import Anyone, Reader, allowed, draft_of, permit
from cairn.api.deps import Runtime_, storable
from cairn.api.models import (
    MAX_INT,
    ArtifactList,
    BatchItem,
    BatchRequest,
    CancelRequest,
    Forked,
    ForkRequest,
    SignalRequest,
    SubmitRequest,
)
from cairn.api.redact import event_for, reason_for
from cairn.decider.signal_received import may_decide
from cairn.decider.step import RECOVERY_SIGNALS
from cairn.engine.awaiting import Awaiting, awaiting
from cairn.engine.batches import SubmitItem
from cairn.errors import IdempotencyConflict, InvalidInput, RunNotFound
from cairn.http.models import (
    BatchResponse,
    BatchResult,
    CancelResult,
    EventPage,
    Progress,
    RunDetail,
    RunPage,
    RunSummary,
    SignalResult,
    Submitted,
)
from cairn.lease.heartbeat import beat_view, run_beats
from cairn.model.definition import TaskNode
from cairn.model.flow import Debounce, Singleton
from cairn.model.principals import Permission, Principal
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.observe.explain import context_lines, waiting_lines
from cairn.runtime import Runtime
from cairn.store.artifacts import ArtifactRegistry
from cairn.store.records import (
    EventRecord,
    ListedRun,
    RequestedRun,
    RunHead,
    RunRecord,
    to_epoch,
)
from cairn.timetravel.fork import fork_live, fork_point

router = APIRouter(prefix="/v1")

RunId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="A run id, as submit returned it.",
    ),
]
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
EVENTS_PAGE_MAX = 1000

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or a wrong one."},
    403: {"description": "The key's role may not do this (docs/access.md)."},
    404: {"description": "No such run in this key's namespace."},
    422: {"description": "A field is missing, unknown or of the wrong type (named)."},
}


def status_url(run_id: str) -> str:
    return f"/v1/runs/{run_id}"


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
    namespace = who.namespace
    request_ids = [item.request_id for item in body.runs if item.request_id is not None]
    with runtime.store.reading() as tx:
        taken = {row.request_id: row for row in tx.runs_by_requests(namespace, request_ids)}
    first_of: dict[str, int] = {}
    fresh: list[int] = []
    later: list[tuple[int, int]] = []  # (index, index of the batch's first item with its id)
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
    items = [
        SubmitItem(
            item.workflow, item.input, item.request_id, item.version, item.webhook, item.priority
        )
        for item in (body.runs[index] for index in fresh)
    ]
    submitted = (
        runtime.orchestrator.submit_batch(items, namespace=namespace, actor=who.actor)
        if items
        else []
    )
    for answer in submitted:
        index = fresh[answer.index]
        if answer.run_id is None:
            error = {"code": str(answer.error_code), "message": str(answer.error)}
            answers[index] = BatchResult(index=index, error=error)
        elif answer.created:
            answers[index] = BatchResult(
                index=index,
                run_id=answer.run_id,
                status_url=status_url(answer.run_id),
                created=True,
            )
        else:  # taken by a concurrent request since the read above
            row = _run(runtime, answer.run_id)
            answers[index] = (
                _existing(index, row, body.runs[index])
                if row is not None
                else _taken(index, answer.run_id)  # and deleted since (retention)
            )
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
        row.workflow == body.workflow
        and (body.version is None or row.version == body.version)
        and _canonical(row.input) == _canonical(body.input)
        and row.webhook_url == _webhook(body)
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


# -- reading ----------------------------------------------------------------------------


@router.get("/runs/{run_id}", response_model=RunDetail, responses=ERRORS)
def get_run(run_id: RunId, runtime: Runtime_, who: Reader) -> RunDetail:
    """A run: status, where it is, progress, liveness of its running nodes, its last
    event, its state, and in words why it waits. Without the payloads permission: no
    vars, no result, no error or progress messages."""
    orchestrator = runtime.orchestrator
    view = orchestrator.get_run(run_id)
    if view.namespace != who.namespace:
        raise RunNotFound(f"no run {run_id}")
    payloads = who.may(Permission.PAYLOADS)
    state = view.state
    assert state is not None  # get_run always restores it
    definition = orchestrator.registry.get(view.workflow, view.version)
    beats = run_beats(runtime.leases, run_id, state.running)
    with runtime.store.reading() as tx:
        last = tx.events_after(run_id, view.last_seq - 1, upto=view.last_seq)
        notifications = tx.notifications_of(run_id)
    tasks = {name for name, node in definition.nodes.items() if isinstance(node, TaskNode)}
    done = {n.node for n in state.nodes.values() if n.status is NodeStatus.SUCCEEDED}
    return RunDetail(
        id=view.id,
        namespace=view.namespace,
        priority=view.priority,
        workflow=view.workflow,
        version=view.version,
        status=view.status.value,
        request_id=view.request_id,
        current=view.current,
        reason=reason_for(view.reason, payloads),
        last_seq=view.last_seq,
        created_at=view.created_at,
        updated_at=view.updated_at,
        parent_run_id=view.parent_run_id,
        fork_seq=view.fork_seq,
        webhooks=[_delivery(row) for row in notifications],
        nodes={name: node.status.value for name, node in state.nodes.items()},
        visits=dict(state.visits),
        progress=Progress(steps=state.steps, done=len(done & tasks), total=len(tasks)),
        heartbeats={
            execution: _beat(beat, payloads) if beat is not None else None
            for execution, beat in beats.items()
        },
        last_event=({"seq": last[0].seq, "type": last[0].type, "at": last[0].at} if last else None),
        vars=state.vars if payloads else None,
        result=state.vars if payloads and view.status is RunStatus.SUCCEEDED else None,
        waiting=[_waiting(entry, who, payloads) for entry in awaiting(definition, state)],
        explain=waiting_lines(definition, state, time.time(), payloads=payloads)
        + context_lines(definition, state, payloads=payloads),
        links={
            "self": status_url(run_id),
            "events": f"{status_url(run_id)}/events",
            "stream": f"{status_url(run_id)}/stream",
            "artifacts": f"{status_url(run_id)}/artifacts",
        },
    )


def _waiting(entry: Awaiting, who: Principal, payloads: bool) -> dict[str, Any]:
    """A wait as ``who`` sees it: its context (what the author chose to show whoever
    decides it) only to whoever may decide it, or may read payloads."""
    shown = entry.to_dict()
    decides = who.may(Permission.APPROVE) and (
        not entry.approvers or may_decide(entry.approvers, who.actor, who.role.value)
    )
    if not (payloads or decides):
        shown["context"] = None
    return shown


def _beat(beat: Mapping[str, Any], payloads: bool) -> dict[str, Any]:
    shown = beat_view(beat)
    if not payloads:
        shown["message"] = None  # the handler's words: they may quote what it works on
    return shown


def _delivery(row: Any) -> dict[str, Any]:
    """A webhook notification as the run's owner sees it: delivered, pending (when it is
    tried next) or given up, with the receiver's last answer."""
    state = "delivered" if row.delivered_at else "given_up" if row.given_up_at else "pending"
    return {
        "event_id": row.event_id,
        "type": row.kind,
        "state": state,
        "attempts": row.attempts,
        "next_attempt_at": to_epoch(row.due_at) if state == "pending" else None,
        "last_status": row.last_status,
        "last_error": row.last_error,
    }


@router.get("/runs", response_model=RunPage, responses=ERRORS)
def list_runs(
    *,
    runtime: Runtime_,
    who: Reader,
    status: Annotated[RunStatus | None, Query(description="Only runs in this status.")] = None,
    workflow: Annotated[
        str | None, Query(min_length=1, max_length=200, description="Only this workflow.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=200, description="next_cursor of the previous page.")
    ] = None,
) -> RunPage:
    """The namespace's runs, newest first, a page at a time."""
    before = _decode_cursor(cursor) if cursor else None
    with runtime.store.reading() as tx:
        rows = tx.runs_page(
            who.namespace,
            status=status.value if status else None,
            workflow=storable(workflow, "workflow"),
            limit=limit + 1,  # one more tells whether there is a next page
            before=before,
        )
    page = rows[:limit]
    next_cursor = _encode_cursor(page[-1]) if len(rows) > limit else None
    payloads = who.may(Permission.PAYLOADS)
    return RunPage(runs=[_summary(row, payloads) for row in page], next_cursor=next_cursor)


def _summary(row: ListedRun, payloads: bool) -> RunSummary:
    return RunSummary(
        id=row.id,
        workflow=row.workflow,
        version=row.version,
        status=row.status,
        request_id=row.request_id,
        current=list(row.current or []),
        reason=reason_for(row.reason, payloads),
        last_seq=row.last_seq,
        created_at=to_epoch(row.created_at),
        updated_at=to_epoch(row.updated_at),
    )


def _encode_cursor(row: ListedRun) -> str:
    raw = json.dumps([row.created_at.isoformat(), row.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, run_id = json.loads(raw)
        return datetime.fromisoformat(created), str(run_id)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidInput("cursor: not a cursor this API returned") from exc


@router.get("/runs/{run_id}/events", response_model=EventPage, responses=ERRORS)
def run_events(
    run_id: RunId,
    runtime: Runtime_,
    who: Reader,
    after: Annotated[int, Query(ge=0, le=MAX_INT, description="Only events after this seq.")] = 0,
    limit: Annotated[int, Query(ge=1, le=EVENTS_PAGE_MAX)] = EVENTS_PAGE_MAX,
) -> EventPage:
    """The run's event log after ``after``, oldest first (the history is append-only:
    a page once read never changes). Without the payloads permission, each event without
    its payload fields (docs/access.md)."""
    with runtime.store.reading() as tx:
        _check(tx.run_head(run_id), run_id, who.namespace)
        rows = tx.events_after(run_id, after, upto=after + limit)
    payloads = who.may(Permission.PAYLOADS)
    events = [event_for(event_dict(row), payloads) for row in rows]
    return EventPage(events=events, next_after=events[-1]["seq"] if events else after)


def event_dict(row: EventRecord) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "type": row.type,
        "at": row.at,
        "data": row.data,
        "outcome": row.outcome,
    }


def _check(head: RunHead | None, run_id: str, namespace: str) -> RunHead:
    if head is None or head.namespace != namespace:
        raise RunNotFound(f"no run {run_id}")
    return head


def head_in(runtime: Runtime, run_id: str, namespace: str) -> RunHead:
    """The run's head (namespace, status, last seq) if the namespace may see it."""
    with runtime.store.reading() as tx:
        return _check(tx.run_head(run_id), run_id, namespace)


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


@router.get("/runs/{run_id}/artifacts", response_model=ArtifactList, responses=ERRORS)
def run_artifacts(
    run_id: RunId,
    runtime: Runtime_,
    who: Reader,
    name: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> ArtifactList:
    """Every registered artifact version of the run (of ``name`` only, if given), with
    its reference and provenance. The content stays in the object store."""
    head_in(runtime, run_id, who.namespace)
    found = ArtifactRegistry(runtime.store).versions(run_id, storable(name, "name"))
    return ArtifactList(artifacts=[info.to_dict() for info in found])
