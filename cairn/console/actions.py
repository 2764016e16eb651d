"""What the console does to a run: decide a wait (approve, reject — with a comment and a
payload held to the wait's schema), cancel, roll back (after a page that lists the
compensations it will run), resolve a flagged effect.

Each is the HTTP API's own endpoint function, called with the signed-in principal after
the very dependency that guards it on ``/v1`` (its permission, its audit action): the
same checks, the same writes, the same audit entry. A form's CSRF token is checked
before any of it (:data:`~cairn.console.web.Form`).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from cairn.api import repair, runs
from cairn.api.errors import field_errors, fields_line, status_of
from cairn.api.models import CancelRequest, ResolveRequest, RollbackRequest, SignalRequest
from cairn.api.scope import RunId
from cairn.console.run_page import run_context
from cairn.console.web import (
    PREFIX,
    ConsoleRoute,
    Form,
    Runtime_,
    Who,
    as_api,
    render,
    runtime_of,
    see_other,
    session_of,
)
from cairn.errors import CairnError, InvalidInput

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)


def _refused(
    request: Request, run_id: str, message: str, status: int, form: dict[str, str] | None = None
) -> Response:
    """The run page again, with why the action was not taken (nothing was written)."""
    who = session_of(request).principal
    context = run_context(request, runtime_of(request), who, run_id)
    return render(request, "run.html", status=status, error=message, form=form or {}, **context)


def _invalid(exc: ValidationError) -> str:
    return fields_line(field_errors(exc.errors()))


@router.post("/runs/{run_id}/signal", response_class=HTMLResponse)
def decide(request: Request, run_id: RunId, runtime: Runtime_, who: Who, form: Form) -> Response:
    """Approve or reject a wait (any of its signals), with a comment and a payload."""
    fields = dict(form)
    text = fields.get("payload", "").strip()
    try:
        payload = json.loads(text) if text else None
        if payload is not None and not isinstance(payload, dict):
            raise InvalidInput("the payload is a JSON object ({...}), or nothing")
        body = SignalRequest(
            payload=payload,
            comment=fields.get("comment") or None,
            node=fields.get("node") or None,
        )
    except json.JSONDecodeError as exc:
        return _refused(request, run_id, f"the payload is not JSON: {exc}", 422, fields)
    except ValidationError as exc:
        return _refused(request, run_id, _invalid(exc), 422, fields)
    except InvalidInput as exc:
        return _refused(request, run_id, str(exc), 422, fields)
    try:
        runs.send_signal(
            run_id=run_id,
            name=fields.get("signal", ""),
            request=request,
            runtime=runtime,
            caller=who,
            body=body,
        )
    except CairnError as exc:
        status = status_of(exc)
        if status in (401, 403, 404):
            raise
        return _refused(request, run_id, str(exc), status, fields)
    return see_other(f"{PREFIX}/runs/{run_id}")


@router.post("/runs/{run_id}/cancel", response_class=HTMLResponse)
def cancel(request: Request, run_id: RunId, runtime: Runtime_, who: Who, form: Form) -> Response:
    checked = as_api(request, who, runs.Canceller)
    try:
        body = CancelRequest(reason=form.get("reason") or "cancelled in the console")
    except ValidationError as exc:
        return _refused(request, run_id, _invalid(exc), 422)
    runs.cancel_run(run_id, runtime, checked, body)
    return see_other(f"{PREFIX}/runs/{run_id}")


@router.get("/runs/{run_id}/rollback", response_class=HTMLResponse)
def rollback_page(request: Request, run_id: RunId, runtime: Runtime_, who: Who) -> Response:
    """The compensations a rollback of the whole run would run, last step first — and
    the form that asks it."""
    plan = repair.rollback_plan(run_id=run_id, runtime=runtime, who=who)
    detail = run_context(request, runtime, who, run_id)["run"]
    return render(request, "rollback.html", run=detail, plan=plan.compensations)


@router.post("/runs/{run_id}/rollback", response_class=HTMLResponse)
def rollback(request: Request, run_id: RunId, runtime: Runtime_, who: Who, form: Form) -> Response:
    checked = as_api(request, who, repair.RollingBack)
    try:
        body = RollbackRequest(
            reason=form.get("reason") or "rolled back in the console",
            confirm=form.get("confirm") == "yes",
        )
    except ValidationError as exc:
        return _refused(request, run_id, _invalid(exc), 422)
    repair.rollback_run(run_id, body, request, runtime, checked)
    return see_other(f"{PREFIX}/runs/{run_id}")


@router.post("/runs/{run_id}/resolve", response_class=HTMLResponse)
def resolve(request: Request, run_id: RunId, runtime: Runtime_, who: Who, form: Form) -> Response:
    """Record what really happened to a flagged effect, with a note."""
    checked = as_api(request, who, repair.Resolver)
    try:
        body = ResolveRequest.model_validate(
            {"outcome": form.get("outcome"), "note": form.get("note") or ""}
        )
    except ValidationError as exc:
        return _refused(request, run_id, _invalid(exc), 422)
    repair.resolve_run_effect(
        run_id=run_id,
        key=form.get("key", ""),
        body=body,
        request=request,
        runtime=runtime,
        who=checked,
    )
    return see_other(f"{PREFIX}/runs/{run_id}")
