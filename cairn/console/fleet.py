"""The fleet page (what the workers do: the workers and their heartbeats, the queues'
depths, the stalled executions; what they share: concurrency pools, rate buckets,
circuits; what is paused; the schedules, with pause and resume), the workflows' versions
and what of each is in flight, and the audit log (admins). Read
and acted on through the API's own functions, as the signed-in principal."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, Response

from cairn.api import admin, fleet, pauses, schedules, versions
from cairn.console.web import PREFIX, ConsoleRoute, Form, Runtime_, Who, as_api, render, see_other

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)
ScheduleName = Annotated[
    str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]


@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(request: Request, runtime: Runtime_, who: Who) -> Response:
    """Who runs the namespace's work, what holds it back, or runs it on a clock."""
    return render(
        request,
        "fleet.html",
        activity=fleet.fleet_activity(runtime, who),
        pools=fleet.concurrency(runtime, who).pools,
        rates=fleet.rates(runtime, who).buckets,
        circuits=fleet.circuits(runtime, who).circuits,
        pauses=pauses.list_pauses(runtime, who).pauses,
        schedules=schedules.list_schedules(runtime, who).schedules,
        now=time.time(),
    )


@router.get("/versions", response_class=HTMLResponse)
def versions_page(request: Request, runtime: Runtime_, who: Who) -> Response:
    """Which versions still have runs in flight, and which are drained."""
    shown = versions.list_versions(runtime, who)
    return render(request, "versions.html", workflows=shown.workflows, builds=shown.builds)


@router.post("/schedules/{name}/pause")
def pause_schedule(
    request: Request, name: ScheduleName, runtime: Runtime_, who: Who, _form: Form
) -> Response:
    schedules.pause_schedule(name, runtime, as_api(request, who, schedules.Scheduler))
    return see_other(f"{PREFIX}/fleet")


@router.post("/schedules/{name}/resume")
def resume_schedule(
    request: Request, name: ScheduleName, runtime: Runtime_, who: Who, _form: Form
) -> Response:
    schedules.resume_schedule(name, runtime, as_api(request, who, schedules.Scheduler))
    return see_other(f"{PREFIX}/fleet")


@router.get("/audit", response_class=HTMLResponse)
def audit_page(
    *,
    request: Request,
    runtime: Runtime_,
    who: Who,
    after: Annotated[int, Query(ge=0)] = 0,
    actor: Annotated[str | None, Query(max_length=300)] = None,
    action: Annotated[str | None, Query(max_length=100)] = None,
    outcome: Annotated[str | None, Query(pattern="^(ok|refused|failed)$")] = None,
) -> Response:
    """The namespace's audit log, oldest first, 100 entries a page (admins)."""
    checked = as_api(request, who, admin.AuditReader)
    page = admin.read_audit(
        runtime=runtime,
        who=checked,
        after=after,
        limit=100,
        actor=actor or None,
        action=action or None,
        outcome=outcome or None,
    )
    return render(
        request,
        "audit.html",
        entries=page.entries,
        next_after=page.next_after,
        actor=actor or "",
        action=action or "",
        outcome=outcome or "",
    )
