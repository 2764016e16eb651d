"""``/v1/versions``: per workflow of the namespace, each version with its runs in flight,
how many of them wait and since when the oldest — what an operator watches to drain a
version before leaving it behind (docs/versions.md#draining-a-version). Read by
``cairn versions`` in remote mode and by the console's versions page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from cairn.api.access import Reader
from cairn.api.deps import Runtime_
from cairn.api.scope import ERRORS
from cairn.engine.retiring import builds_of
from cairn.engine.versions import versions_of
from cairn.http.models import VersionList

router = APIRouter(prefix="/v1")
WorkflowQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=200, description="Only this workflow (its name)."),
]


@router.get("/versions", response_model=VersionList, responses=ERRORS)
def list_versions(runtime: Runtime_, who: Reader, workflow: WorkflowQuery = None) -> VersionList:
    """The namespace's workflows, each version registered or still run: its runs in
    flight (and on which builds), how many of them wait, when the oldest was created,
    whether it is drained; and the fleet's builds, each live or not and safe to retire
    or not."""
    shown = versions_of(runtime.orchestrator, who.namespace, workflow)
    builds = builds_of(runtime.orchestrator)
    return VersionList.model_validate(
        {"workflows": [w.to_dict() for w in shown], "builds": [b.to_dict() for b in builds]}
    )
