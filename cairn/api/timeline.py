"""A run's timeline over HTTP, as ``cairn history|state|diff|replay|fork`` show it:
its steps, its state after any event, what changed between two, and its handlers run
again — a replay of its recorded steps, a fork's dry run — isolated from the world.

The history shows a run's shape to any reader (without the payloads permission, without
error messages); a state or a diff is payload, read with that permission and audited.
A replay and a dry run execute the workflow's handlers in this API process, with the
code it can import (deploy the API with the workflows' code), intercepted as the CLI's
are: effects, model calls and HTTP requests answered from the run's records, never sent.
Without the payloads permission their reports come without values.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from cairn.api.access import Reader, allowed, draft_of
from cairn.api.deps import Runtime_
from cairn.api.models import MAX_INT, DryRunRequest, ReplayRequest
from cairn.api.redact import without_payloads
from cairn.api.scope import ERRORS, RunId, head_in
from cairn.errors import CodeUnavailable
from cairn.http.models import DiffView, DryRunView, HistoryView, ReplayView, StateView
from cairn.model.principals import Permission, Principal
from cairn.timetravel.diff import plain
from cairn.timetravel.fork import dry_run, fork_point
from cairn.timetravel.replay import Replayer
from cairn.timetravel.timeline import Timeline

router = APIRouter(prefix="/v1")

StateReader = Annotated[
    Principal, Depends(allowed(Permission.READ, Permission.PAYLOADS, action="run.state"))
]
DiffReader = Annotated[
    Principal, Depends(allowed(Permission.READ, Permission.PAYLOADS, action="run.diff"))
]
Replayer_ = Annotated[Principal, Depends(allowed(Permission.REPLAY, action="run.replay"))]
DryRunner = Annotated[Principal, Depends(allowed(Permission.REPLAY, action="run.dry_run"))]
CODE: dict[int | str, dict[str, Any]] = {
    409: {"description": "This API process cannot import the workflow's code."}
}


@router.get("/runs/{run_id}/history", response_model=HistoryView, responses=ERRORS)
def run_history(run_id: RunId, runtime: Runtime_, who: Reader) -> HistoryView:
    """Every step of the run — seq, node, visit, attempt, phase, digests of its inputs and
    outputs, duration, retries, recoveries, holds, compensations — and its other events
    (signals, timers, cancel, rollback) in between."""
    head_in(runtime, run_id, who.namespace)
    found = Timeline(runtime.orchestrator, run_id).history().to_dict()
    return HistoryView.model_validate(_shown(found, who))


@router.get("/runs/{run_id}/state", response_model=StateView, responses=ERRORS)
def run_state(
    run_id: RunId,
    runtime: Runtime_,
    who: StateReader,
    at: Annotated[int | None, Query(ge=1, le=MAX_INT, description="Default: now.")] = None,
) -> StateView:
    """The run's full state after event ``at``: the latest snapshot at or before it and
    the events since, replayed through the decider (nothing runs again)."""
    head = head_in(runtime, run_id, who.namespace)
    state = Timeline(runtime.orchestrator, run_id).state_at(at)
    return StateView(run_id=run_id, seq=at if at is not None else head.last_seq, state=plain(state))


@router.get("/runs/{run_id}/diff", response_model=DiffView, responses=ERRORS)
def run_diff(
    run_id: RunId,
    runtime: Runtime_,
    who: DiffReader,
    from_seq: Annotated[int, Query(alias="from", ge=1, le=MAX_INT)],
    to_seq: Annotated[int, Query(alias="to", ge=1, le=MAX_INT)],
) -> DiffView:
    """What changed in the run's state from after event ``from`` to after event ``to``."""
    head_in(runtime, run_id, who.namespace)
    changes = Timeline(runtime.orchestrator, run_id).diff(from_seq, to_seq)
    return DiffView(
        run_id=run_id,
        from_seq=from_seq,
        to_seq=to_seq,
        changes=[change.to_dict() for change in changes],
    )


@router.post("/runs/{run_id}/replay", response_model=ReplayView, responses={**CODE, **ERRORS})
def replay_run(
    run_id: RunId,
    request: Request,
    runtime: Runtime_,
    who: Replayer_,
    body: ReplayRequest | None = None,
) -> ReplayView:
    """Run the handlers of the run's recorded steps again (from ``from_seq``), each on
    the state it was given, isolated: nothing is written, nothing reaches the world.
    Where a result differs from the recorded one, the step says ``diverged``."""
    head_in(runtime, run_id, who.namespace)
    body = body or ReplayRequest()
    with _code_of(run_id):
        report = Replayer(runtime.orchestrator, run_id).run(body.from_seq)
    _note(request, diverged=report.diverged, refused=len(report.refused))
    return ReplayView.model_validate(_shown(report.to_dict(), who))


@router.post("/runs/{run_id}/fork/dry-run", response_model=DryRunView, responses={**CODE, **ERRORS})
def dry_run_fork(
    run_id: RunId, body: DryRunRequest, request: Request, runtime: Runtime_, who: DryRunner
) -> DryRunView:
    """A fork's dry run: from the run's state after ``at_seq``, its vars patched, run
    forward in this process, isolated as a replay is; it stops at the end, at a wait, at
    a refused effect or call, or after ``max_steps`` decisions. Nothing is written."""
    head_in(runtime, run_id, who.namespace)
    point = fork_point(runtime.orchestrator, run_id, body.at_seq, body.patch)
    with _code_of(run_id):
        found = dry_run(runtime.orchestrator, point, max_steps=body.max_steps)
    _note(request, at_seq=body.at_seq, ending=found.ending)
    shown = {**found.to_dict(), "went_well": found.went_well}
    return DryRunView.model_validate(_shown(shown, who))


@contextmanager
def _code_of(run_id: str) -> Iterator[None]:
    """A handler that cannot be imported here becomes :class:`CodeUnavailable`."""
    try:
        yield
    except (ImportError, AttributeError) as exc:
        raise CodeUnavailable(
            f"run {run_id}'s handlers cannot be imported by this API process "
            f"({type(exc).__name__}: {exc}); deploy it with the workflows' code, or replay "
            "with the CLI where the code is"
        ) from exc


def _shown(report: dict[str, Any], who: Principal) -> dict[str, Any]:
    shown: dict[str, Any] = report if who.may(Permission.PAYLOADS) else without_payloads(report)
    return shown


def _note(request: Request, **detail: Any) -> None:
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(detail)
