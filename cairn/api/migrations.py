"""Migrating runs in flight between versions of their workflow over HTTP, as ``cairn
runs migrate`` does (docs/versions.md): ``POST /v1/runs:migrate`` checks (a dry run, the
default) or moves the key's namespace's runs of one version, and ``POST
/v1/runs/{id}/migration/rollback`` undoes one run's move. Both are an admin's (``migrate``):
a migration changes what code runs execute, as registering a definition does. The mapping
is imported by the API process, as a replay's handlers are."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from cairn.api.access import allowed, draft_of
from cairn.api.deps import Runtime_
from cairn.api.models import Reason, Short, Version
from cairn.api.models import Request as Body
from cairn.api.scope import ERRORS, RunId, head_in
from cairn.engine.migrations import MigrationRequest
from cairn.http.models import MigrationUndone, MigrationView
from cairn.model.migrations import Where
from cairn.model.principals import Permission, Principal

router = APIRouter(prefix="/v1")

Migrator = Annotated[Principal, Depends(allowed(Permission.MIGRATE, action="runs.migrate"))]
Unmigrator = Annotated[
    Principal, Depends(allowed(Permission.MIGRATE, action="run.migration.rollback"))
]
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "The mapping cannot be imported here, or the move cannot be undone."}
}
Condition = Annotated[str, Field(min_length=3, max_length=500)]


class MigrateRequest(Body):
    workflow: Short = Field(description="The workflow's name in the key's namespace.")
    from_version: Version
    to_version: Version
    mapping: Annotated[str, Field(min_length=3, max_length=300, pattern=r"^[\w.]+:[\w.]+$")] = (
        Field(description="The mapping's import path, module:function (docs/versions.md).")
    )
    where: Annotated[list[Condition], Field(max_length=50)] = Field(
        default_factory=list, description="KEY=VALUE conditions, as cairn runs migrate --where."
    )
    reason: Reason | None = None
    dry_run: bool = Field(default=True, description="Only check (the default); false moves.")


class UndoRequest(Body):
    reason: Reason | None = None


@router.post("/runs:migrate", response_model=MigrationView, responses={**CONFLICT, **ERRORS})
def migrate_runs(
    body: MigrateRequest, request: Request, runtime: Runtime_, who: Migrator
) -> MigrationView:
    """Check every unfinished run of ``workflow@from_version`` against its own history and
    the mapping, and say per run what would move and why not (a dry run, writing nothing);
    with ``dry_run: false``, move each that passes, each with its ``run_migrated`` event."""
    asked = MigrationRequest(
        who.namespace,
        body.workflow,
        body.from_version,
        body.to_version,
        body.mapping,
        Where.parse(body.where),
        body.reason or "",
    )
    report = runtime.orchestrator.migrate_runs(asked, actor=who.actor, dry_run=body.dry_run)
    draft = draft_of(request)
    if draft is not None:
        found = report.to_dict()
        draft.detail.update(
            {key: found[key] for key in ("workflow", "from_version", "to_version", "mapping")}
        )
        draft.detail.update(dry_run=body.dry_run, selected=found["selected"], moved=found["moved"])
    return MigrationView(**report.to_dict())


@router.post(
    "/runs/{run_id}/migration/rollback",
    response_model=MigrationUndone,
    responses={**CONFLICT, **ERRORS},
)
def rollback_migration(
    run_id: RunId, runtime: Runtime_, who: Unmigrator, body: UndoRequest | None = None
) -> MigrationUndone:
    """Return a migrated run to its old version, as it was just before the migration,
    with an event of its own. 409 once anything has happened to it since."""
    head_in(runtime, run_id, who.namespace)
    reason = body.reason if body is not None and body.reason else ""
    undone = runtime.orchestrator.rollback_migration(run_id, actor=who.actor, reason=reason)
    return MigrationUndone(
        run_id=run_id, version=undone.version, status=undone.status.value, seq=undone.seq
    )
