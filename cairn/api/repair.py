"""Repairing runs and what they did outside, over HTTP, as ``cairn rollback|effects|
resolve|reconcile`` do: a rollback and the compensations it will run, a run's effects
ledger, a person's resolution of an effect the reconciler could not settle, and a
reconciliation pass over the namespace's effects."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from cairn.api.access import Reader, allowed, draft_of
from cairn.api.deps import Runtime_
from cairn.api.models import MAX_INT, ReconcileRequest, ResolveRequest, RollbackRequest, Short
from cairn.api.redact import without_payloads
from cairn.api.scope import ERRORS, RunId, head_in
from cairn.effects.adapters import Effect
from cairn.effects.resolution import Outcome, Resolve, resolve_effect
from cairn.http.models import (
    Compensation,
    DriftView,
    EffectList,
    EffectView,
    RollbackPlan,
    RolledBack,
)
from cairn.model.principals import Permission, Principal
from cairn.reconciler import Reconciler

router = APIRouter(prefix="/v1")

RollingBack = Annotated[Principal, Depends(allowed(Permission.ROLLBACK, action="run.rollback"))]
Resolver = Annotated[Principal, Depends(allowed(Permission.RESOLVE, action="effect.resolve"))]
Reconciling = Annotated[Principal, Depends(allowed(Permission.RECONCILE, action="reconcile"))]
EffectKey = Annotated[str, Query(min_length=1, max_length=500, description="The effect's key.")]
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "Not confirmed, or the run cannot be rolled back now."}
}


@router.get("/runs/{run_id}/rollback", response_model=RollbackPlan, responses=ERRORS)
def rollback_plan(
    *,
    run_id: RunId,
    runtime: Runtime_,
    who: Reader,
    to_seq: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    step: Annotated[Short | None, Query()] = None,
    step_iteration: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
) -> RollbackPlan:
    """The compensations a rollback asked now would run, in order — of the whole run, of
    the steps after ``to_seq``, or of one ``step`` — without asking it."""
    head_in(runtime, run_id, who.namespace)
    plan = runtime.orchestrator.rollback_plan(
        run_id, to_seq=to_seq, step=step, step_iteration=step_iteration
    )
    return RollbackPlan(run_id=run_id, compensations=[Compensation(**entry) for entry in plan])


@router.post(
    "/runs/{run_id}/rollback",
    status_code=202,
    response_model=RolledBack,
    responses={**CONFLICT, **ERRORS},
)
def rollback_run(
    run_id: RunId, body: RollbackRequest, request: Request, runtime: Runtime_, who: RollingBack
) -> RolledBack:
    """Roll the run back: stop it and compensate every step that took effect (last
    first), ending ``rolled_back``; or only the steps after ``to_seq``, then resume from
    there; or only ``step``'s change, then go on. 409 unless ``confirm`` is true. The
    answer lists the compensations it runs."""
    head_in(runtime, run_id, who.namespace)
    orchestrator = runtime.orchestrator
    step, iteration = body.step, body.step_iteration
    plan = orchestrator.rollback_plan(
        run_id, to_seq=body.to_seq, step=step, step_iteration=iteration
    )
    decision = orchestrator.rollback(
        run_id,
        body.reason,
        actor=who.actor,
        confirm=body.confirm,
        to_seq=body.to_seq,
        step=step,
        step_iteration=iteration,
    )
    draft = draft_of(request)
    if draft is not None:
        asked = {"to_seq": body.to_seq, "step": step, "step_iteration": iteration}
        draft.detail.update({k: v for k, v in asked.items() if v is not None})
    return RolledBack(
        run_id=run_id,
        status=decision.state.status.value,
        compensations=[Compensation(**entry) for entry in plan],
    )


@router.get("/runs/{run_id}/effects", response_model=EffectList, responses=ERRORS)
def run_effects(run_id: RunId, runtime: Runtime_, who: Reader) -> EffectList:
    """The run's effects ledger: each external side effect by its key, its status
    (intent, applied, failed, unknown, absent, flagged, compensated), calls, digest and
    any person's resolution. Results and errors need the payloads permission."""
    head_in(runtime, run_id, who.namespace)
    with runtime.store.reading() as tx:
        found = [Effect.from_row(row) for row in tx.effects_of(run_id)]
    return EffectList(effects=[_effect(effect, who) for effect in found])


@router.post(
    "/runs/{run_id}/effects/resolve",
    response_model=EffectView,
    responses={409: {"description": "The effect is not flagged or unknown."}, **ERRORS},
)
def resolve_run_effect(
    *,
    run_id: RunId,
    key: EffectKey,
    body: ResolveRequest,
    request: Request,
    runtime: Runtime_,
    who: Resolver,
) -> EffectView:
    """Record what really happened to an effect the reconciler flagged, or whose outcome
    nobody could tell: it took effect (``record``: the external system's record of it),
    it never did, or it was undone by hand — with a note. It leaves the reconciler's
    report; the ledger keeps what it was, who resolved it, when and why."""
    head_in(runtime, run_id, who.namespace)
    asked = Resolve(run_id, key, Outcome(body.outcome), body.note, who.actor, body.record)
    effect = resolve_effect(runtime.store, asked)
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(key=key, outcome=body.outcome, was=(effect.resolution or {}).get("was"))
    return EffectView(effect=_effect(effect, who))


@router.post("/reconcile", response_model=DriftView, responses=ERRORS)
def reconcile(
    runtime: Runtime_, who: Reconciling, request: Request, body: ReconcileRequest | None = None
) -> DriftView:
    """One reconciliation pass over this namespace's effects: compare the ledger with the
    external systems (through the adapters this process has), repair timing gaps, and
    report what needs a person (``needs_human``)."""
    body = body or ReconcileRequest()
    grace = body.grace_s if body.grace_s is not None else runtime.settings.reconcile_grace
    drift = Reconciler(runtime.store, grace, namespace=who.namespace).run_once(body.limit)
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(checked=drift.checked, needs_human=len(drift.needs_human))
    shown = drift.to_dict()
    return DriftView.model_validate(
        shown if who.may(Permission.PAYLOADS) else without_payloads(shown)
    )


def _effect(effect: Effect, who: Principal) -> dict[str, object]:
    shown = effect.to_dict()
    return shown if who.may(Permission.PAYLOADS) else without_payloads(shown)
