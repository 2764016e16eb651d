"""``/v1/schedules``: cron schedules of the caller's namespace — add, list, read, change,
pause, resume, delete, backfill. Another namespace's schedule is "not found", as a run is.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response

from cairn.api.access import Reader, allowed
from cairn.api.deps import Runtime_
from cairn.api.models import BackfillRequest, ScheduleChange, ScheduleRequest
from cairn.engine.schedules import Schedules
from cairn.http.models import BackfillResult, ScheduleList, ScheduleView
from cairn.model.principals import Permission, Principal
from cairn.model.schedules import OverlapPolicy, ScheduleSpec, seconds_of
from cairn.runtime import Runtime
from cairn.store.records import ScheduleRecord

router = APIRouter(prefix="/v1")

Name = Annotated[
    str,
    Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$"),
]
Scheduler = Annotated[Principal, Depends(allowed(Permission.SCHEDULES, action="schedule.change"))]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or a wrong one."},
    403: {"description": "The key's role may not do this (docs/access.md)."},
    404: {"description": "No such schedule in this key's namespace (or workflow)."},
    422: {"description": "A bad field, cron expression, time zone or input (named)."},
}


def _schedules(runtime: Runtime) -> Schedules:
    return runtime.orchestrator.schedules


def _view(
    row: ScheduleRecord, runs: list[dict[str, str]] | None = None, *, payloads: bool = True
) -> ScheduleView:
    values = row.to_dict()
    values.pop("ticks_from")
    if not payloads:
        values["input"] = None  # what its runs start with: a payload
    return ScheduleView(**values, runs=runs)


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleView,
    responses={409: {"description": "The name is taken in this namespace."}, **ERRORS},
)
def add_schedule(body: ScheduleRequest, runtime: Runtime_, who: Scheduler) -> ScheduleView:
    """Add a schedule: a run of ``workflow`` at every tick of ``cron`` in ``timezone``."""
    spec = ScheduleSpec(
        name=body.name,
        cron=body.cron,
        workflow=body.workflow,
        version=body.version,
        timezone=body.timezone,
        input=body.input,
        overlap=OverlapPolicy.parse(body.overlap),
        catch_up_s=seconds_of(body.catch_up, "catch_up"),
        jitter_s=seconds_of(body.jitter, "jitter", allow_zero=True),
    )
    return _view(_schedules(runtime).add(who.namespace, spec, paused=body.paused))


@router.get("/schedules", response_model=ScheduleList, responses=ERRORS)
def list_schedules(runtime: Runtime_, who: Reader) -> ScheduleList:
    """The namespace's schedules, by name."""
    rows = _schedules(runtime).of_namespace(who.namespace)
    payloads = who.may(Permission.PAYLOADS)
    return ScheduleList(schedules=[_view(row, payloads=payloads) for row in rows])


@router.get("/schedules/{name}", response_model=ScheduleView, responses=ERRORS)
def get_schedule(name: Name, runtime: Runtime_, who: Reader) -> ScheduleView:
    """A schedule, where its ticks stand, and the runs its ticks started lately."""
    schedules = _schedules(runtime)
    row = schedules.get(who.namespace, name)
    runs = [
        {"tick": run.request_id.split(":", 2)[2], "run_id": run.id, "status": run.status}
        for run in schedules.runs(who.namespace, name)
    ]
    return _view(row, runs, payloads=who.may(Permission.PAYLOADS))


@router.patch("/schedules/{name}", response_model=ScheduleView, responses=ERRORS)
def change_schedule(
    name: Name, body: ScheduleChange, runtime: Runtime_, who: Scheduler
) -> ScheduleView:
    """Change what a schedule starts or when; its ticks go on from where they stand."""
    changes: dict[str, Any] = body.model_dump(exclude_unset=True)
    if "catch_up" in changes:
        changes["catch_up_s"] = seconds_of(changes.pop("catch_up"), "catch_up")
    if "jitter" in changes:
        changes["jitter_s"] = seconds_of(changes.pop("jitter"), "jitter", allow_zero=True)
    if "overlap" in changes:
        changes["overlap"] = OverlapPolicy.parse(changes["overlap"])
    return _view(_schedules(runtime).change(who.namespace, name, changes))


@router.post("/schedules/{name}/pause", response_model=ScheduleView, responses=ERRORS)
def pause_schedule(name: Name, runtime: Runtime_, who: Scheduler) -> ScheduleView:
    """Stop ticking: ticks that come while paused are not started, then or later."""
    return _view(_schedules(runtime).pause(who.namespace, name))


@router.post("/schedules/{name}/resume", response_model=ScheduleView, responses=ERRORS)
def resume_schedule(name: Name, runtime: Runtime_, who: Scheduler) -> ScheduleView:
    """Tick again, from now."""
    return _view(_schedules(runtime).resume(who.namespace, name))


@router.delete("/schedules/{name}", status_code=204, responses=ERRORS)
def delete_schedule(name: Name, runtime: Runtime_, who: Scheduler) -> Response:
    """Delete a schedule; the runs it started go on."""
    _schedules(runtime).delete(who.namespace, name)
    return Response(status_code=204)


@router.post("/schedules/{name}/backfill", response_model=BackfillResult, responses=ERRORS)
def backfill_schedule(
    name: Name, body: BackfillRequest, runtime: Runtime_, who: Scheduler
) -> BackfillResult:
    """Start a run for every tick in [start, end), now, whatever the overlap policy; a
    tick that has its run already (from the schedule or an earlier backfill) starts
    nothing new."""
    done = _schedules(runtime).backfill(who.namespace, name, body.start, body.end, actor=who.actor)
    return BackfillResult(
        ticks=done.ticks, created=done.created, existing=done.existing, run_ids=done.run_ids
    )
