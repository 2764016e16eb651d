"""The requests of an operator's work on runs, written once as :mod:`cairn.http.calls`
writes the others: what waits for a person, a run's timeline (history, state, diff,
replay, a fork's dry run, a live fork), its repairs (rollback, the effects ledger,
resolving an effect, reconciliation), its artifacts and model calls, and bulk actions.

Each function is also a method of both clients, which bind them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from cairn.http.calls import Call, present, run_path
from cairn.http.models import (
    ArtifactList,
    BulkResult,
    DiffView,
    DriftView,
    DryRunView,
    EffectList,
    EffectView,
    Forked,
    HistoryView,
    MigrationUndone,
    MigrationView,
    ModelCallList,
    ReplayView,
    RollbackPlan,
    RolledBack,
    StateView,
    WaitingList,
)


def waiting(limit: int = 100) -> Call[WaitingList]:
    """The namespace's runs waiting for a person, longest waiting first."""
    return Call("GET", "/v1/waiting", WaitingList.model_validate, params={"limit": limit})


def artifacts(run_id: str, name: str | None = None) -> Call[ArtifactList]:
    """The run's artifact versions (of ``name`` only, if given), with provenance."""
    params = present(name=name)
    return Call("GET", f"{run_path(run_id)}/artifacts", ArtifactList.model_validate, params=params)


def model_calls(run_id: str, node: str | None = None) -> Call[ModelCallList]:
    """The run's recorded model calls (of ``node`` only, if given); payloads permission."""
    params = present(node=node)
    path = f"{run_path(run_id)}/model-calls"
    return Call("GET", path, ModelCallList.model_validate, params=params)


# -- the timeline ---------------------------------------------------------------------------


def history(run_id: str) -> Call[HistoryView]:
    """Every step of the run and its other events."""
    return Call("GET", f"{run_path(run_id)}/history", HistoryView.model_validate)


def state(run_id: str, at: int | None = None) -> Call[StateView]:
    """The run's full state after event ``at`` (default: now); payloads permission."""
    params = present(at=at)
    return Call("GET", f"{run_path(run_id)}/state", StateView.model_validate, params=params)


def diff(run_id: str, from_seq: int, to_seq: int) -> Call[DiffView]:
    """What changed in the run's state from after ``from_seq`` to after ``to_seq``."""
    params = {"from": from_seq, "to": to_seq}
    return Call("GET", f"{run_path(run_id)}/diff", DiffView.model_validate, params=params)


def replay(run_id: str, from_seq: int = 1) -> Call[ReplayView]:
    """Run the recorded steps' handlers again in the API process, isolated."""
    body = {"from_seq": from_seq}
    return Call("POST", f"{run_path(run_id)}/replay", ReplayView.model_validate, body=body)


def dry_run(
    run_id: str, at_seq: int, patch: Mapping[str, Any] | None = None, max_steps: int = 200
) -> Call[DryRunView]:
    """A fork's dry run from the state after ``at_seq``, its vars patched."""
    body = present(at_seq=at_seq, patch=patch, max_steps=max_steps)
    path = f"{run_path(run_id)}/fork/dry-run"
    return Call("POST", path, DryRunView.model_validate, body=body)


def fork(run_id: str, at_seq: int, patch: Mapping[str, Any] | None = None) -> Call[Forked]:
    """A live fork from the checkpoint after ``at_seq``: a real run (confirmed here: the
    caller asked for it by calling this)."""
    body = present(at_seq=at_seq, patch=patch, confirm=True)
    return Call("POST", f"{run_path(run_id)}/fork", Forked.model_validate, body=body)


# -- repairs --------------------------------------------------------------------------------


def rollback_plan(
    run_id: str,
    *,
    to_seq: int | None = None,
    step: str | None = None,
    step_iteration: int | None = None,
) -> Call[RollbackPlan]:
    """The compensations a rollback asked now would run, last step first."""
    params = present(to_seq=to_seq, step=step, step_iteration=step_iteration)
    path = f"{run_path(run_id)}/rollback"
    return Call("GET", path, RollbackPlan.model_validate, params=params)


def rollback(
    run_id: str,
    reason: str,
    *,
    to_seq: int | None = None,
    step: str | None = None,
    step_iteration: int | None = None,
) -> Call[RolledBack]:
    """Roll the run back (confirmed: see :func:`rollback_plan` for what it runs)."""
    body = present(
        reason=reason, confirm=True, to_seq=to_seq, step=step, step_iteration=step_iteration
    )
    return Call("POST", f"{run_path(run_id)}/rollback", RolledBack.model_validate, body=body)


def migrate_runs(
    workflow: str,
    from_version: int,
    to_version: int,
    mapping: str,
    *,
    where: Sequence[str] = (),
    reason: str | None = None,
    dry_run: bool = True,
) -> Call[MigrationView]:
    """Move the namespace's runs of ``workflow`` from one version to another through the
    mapping at ``mapping`` (``module:function``, importable by the API): a dry run by
    default, which checks every run and writes nothing (admin; docs/versions.md)."""
    body = present(
        workflow=workflow,
        from_version=from_version,
        to_version=to_version,
        mapping=mapping,
        where=list(where),
        reason=reason,
        dry_run=dry_run,
    )
    return Call("POST", "/v1/runs:migrate", MigrationView.model_validate, body=body)


def rollback_migration(run_id: str, reason: str | None = None) -> Call[MigrationUndone]:
    """Return a migrated run, unmoved since, to its old version as it was (admin)."""
    body = present(reason=reason)
    path = f"{run_path(run_id)}/migration/rollback"
    return Call("POST", path, MigrationUndone.model_validate, body=body)


def effects(run_id: str) -> Call[EffectList]:
    """The run's effects ledger, with any person's resolution."""
    return Call("GET", f"{run_path(run_id)}/effects", EffectList.model_validate)


def resolve(
    run_id: str, key: str, outcome: str, note: str, record: Mapping[str, Any] | None = None
) -> Call[EffectView]:
    """Record what really happened to a flagged or unknown effect: ``applied``,
    ``absent`` or ``compensated``, with a note (and the external system's record)."""
    body = present(outcome=outcome, note=note, record=record)
    path = f"{run_path(run_id)}/effects/resolve"
    return Call("POST", path, EffectView.model_validate, params={"key": key}, body=body)


def reconcile(grace_s: float | None = None, limit: int = 500) -> Call[DriftView]:
    """One reconciliation pass over the namespace's effects (admins)."""
    body = present(grace_s=grace_s, limit=limit)
    return Call("POST", "/v1/reconcile", DriftView.model_validate, body=body)


# -- bulk actions ---------------------------------------------------------------------------


def run_selection(
    *,
    status: Sequence[str] = (),
    workflow: str | None = None,
    version: int | None = None,
    created_after: float | None = None,
    created_before: float | None = None,
    ids: Sequence[str] = (),
) -> dict[str, Any]:
    """A bulk action's ``filter``: every field given narrows."""
    return present(
        status=list(status) or None,
        workflow=workflow,
        version=version,
        created_after=created_after,
        created_before=created_before,
        ids=list(ids) or None,
    )


def bulk_cancel(
    selection: Mapping[str, Any],
    reason: str | None = None,
    *,
    dry_run: bool = True,
    expect: str | None = None,
) -> Call[BulkResult]:
    """Cancel every unfinished run ``selection`` selects: a dry run (counting them)
    unless ``dry_run`` is False; ``expect`` is the dry run's selection token."""
    body = _bulk(selection, dry_run, expect, reason=reason)
    return Call("POST", "/v1/bulk/cancel", BulkResult.model_validate, body=body)


def bulk_signal(
    selection: Mapping[str, Any],
    name: str,
    payload: Mapping[str, Any] | None = None,
    *,
    comment: str | None = None,
    dry_run: bool = True,
    expect: str | None = None,
) -> Call[BulkResult]:
    """Send signal ``name`` to every waiting run ``selection`` selects."""
    body = _bulk(selection, dry_run, expect, payload=payload, comment=comment)
    path = f"/v1/bulk/signals/{quote(name, safe='')}"
    return Call("POST", path, BulkResult.model_validate, body=body)


def bulk_fork(
    selection: Mapping[str, Any],
    patch: Mapping[str, Any] | None = None,
    *,
    dry_run: bool = True,
    expect: str | None = None,
) -> Call[BulkResult]:
    """Fork every failed run ``selection`` selects from its failure, its vars patched."""
    body = _bulk(selection, dry_run, expect, patch=patch)
    return Call("POST", "/v1/bulk/fork", BulkResult.model_validate, body=body)


def _bulk(
    selection: Mapping[str, Any], dry_run: bool, expect: str | None, **action: Any
) -> dict[str, Any]:
    # The token doubles as the idempotency of a signal's or fork's ids: asked again
    # after a lost answer, the same runs are not signalled or forked twice.
    return present(filter=dict(selection), dry_run=dry_run, selection=expect, **action)
