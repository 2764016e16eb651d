"""``/v1/pauses``: pausing a workflow's new starts, or a queue, in the caller's namespace
— and resuming them (docs/operations.md#pausing-starts-and-queues)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import Field

from cairn.api.access import Reader, allowed, draft_of
from cairn.api.deps import Runtime_
from cairn.api.models import Request as Body
from cairn.http.models import Paused, PauseList, PauseView, Resumed
from cairn.model.pauses import MAX_REASON, Pause, PauseKind
from cairn.model.principals import Permission, Principal

router = APIRouter(prefix="/v1")

Kind = Annotated[PauseKind, Path(description="`workflow` or `queue`.")]
Name = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
Pauser = Annotated[Principal, Depends(allowed(Permission.PAUSE, action="pause.change"))]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or a wrong one."},
    403: {"description": "The key's role may not pause (docs/access.md)."},
    404: {"description": "No such workflow, or (resuming) nothing paused by that name."},
    422: {"description": "A bad name, or no reason."},
}


class PauseRequest(Body):
    reason: str = Field(min_length=1, max_length=MAX_REASON)


def _view(pause: Pause) -> PauseView:
    return PauseView(
        kind=pause.kind.value,
        name=pause.name,
        namespace=pause.namespace,
        reason=pause.reason,
        paused_by=pause.paused_by,
        paused_at=pause.paused_at,
        held=pause.held,
    )


@router.get("/pauses", response_model=PauseList, responses=ERRORS)
def list_pauses(runtime: Runtime_, who: Reader) -> PauseList:
    """What the namespace has paused, oldest first, with the runs each workflow holds."""
    return PauseList(pauses=[_view(p) for p in runtime.orchestrator.pauses.list(who.namespace)])


@router.post("/pauses/{kind}/{name}", response_model=Paused, responses=ERRORS)
def pause(
    kind: Kind, name: Name, body: PauseRequest, *, request: Request, runtime: Runtime_, who: Pauser
) -> Paused:
    """Pause a workflow's new starts (submissions are accepted and held, and start as
    their submitters when it resumes) or a queue (the namespace's node messages for it
    wait in the outbox). Answers once every process knows (about a second)."""
    _note(request, kind, name)
    pauses = runtime.orchestrator.pauses
    created = pauses.pause(who.namespace, kind, name, reason=body.reason, actor=who.actor)
    found = next(p for p in pauses.list(who.namespace) if (p.kind, p.name) == (kind, name))
    return Paused(pause=_view(found), created=created)


@router.post("/pauses/{kind}/{name}/resume", response_model=Resumed, responses=ERRORS)
def resume(kind: Kind, name: Name, request: Request, runtime: Runtime_, who: Pauser) -> Resumed:
    """Lift the pause: a workflow's held runs start, oldest first, each as its
    submitter; a queue's messages are published again."""
    _note(request, kind, name)
    started = runtime.orchestrator.pauses.resume(who.namespace, kind, name, actor=who.actor)
    return Resumed(kind=kind.value, name=name, started=started)


def _note(request: Request, kind: PauseKind, name: str) -> None:
    draft = draft_of(request)
    if draft is not None:
        draft.target = f"{kind.value}:{name}"
