"""Bulk actions from the runs page: cancel, or send a signal to, every run its filter
selects — first as a dry run that counts them ("this will cancel 12 runs") and answers
their selection token, then, confirmed, on exactly those runs (a filter that selects
others by then is refused, nothing done). Each step is the API's own bulk endpoint
(``POST /v1/bulk/cancel``, ``POST /v1/bulk/signals/{name}``) called as the signed-in
principal, behind the same permission check and audit."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from cairn.api import bulk
from cairn.api.errors import field_errors, fields_line, status_of
from cairn.console.web import PREFIX, ConsoleRoute, Form, Runtime_, Who, as_api, render
from cairn.errors import CairnError, InvalidInput
from cairn.http.models import BulkResult
from cairn.model.principals import Principal
from cairn.runtime import Runtime

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)
SHOWN = 50  # run ids listed on the confirmation page; the count is of them all
ACTIONS = ("cancel", "signal")


def filter_fields(form: Mapping[str, str]) -> dict[str, Any]:
    """The runs page's filter as the bulk endpoints take it (``statuses``: comma
    separated; ``created_after``: the epoch the page's "since" stood for when shown)."""
    chosen: dict[str, Any] = {}
    statuses = [s for s in form.get("statuses", "").split(",") if s]
    if statuses:
        chosen["status"] = statuses
    if form.get("workflow"):
        chosen["workflow"] = form["workflow"]
    if form.get("created_after"):
        try:
            chosen["created_after"] = float(form["created_after"])
        except ValueError as exc:
            raise InvalidInput("created_after is a time in epoch seconds") from exc
    return chosen


def _body(form: Mapping[str, str], confirmed: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"filter": filter_fields(form), "dry_run": not confirmed}
    if confirmed:
        body["selection"] = form.get("selection") or None
    if form.get("action") == "signal":
        text = form.get("payload", "").strip()
        try:
            payload = json.loads(text) if text else None
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"the payload is not JSON: {exc}") from exc
        body.update(payload=payload, comment=form.get("comment") or None)
    else:
        body["reason"] = form.get("reason") or "cancelled in bulk in the console"
    return body


def _act(
    request: Request, runtime: Runtime, who: Principal, form: Mapping[str, str], confirmed: bool
) -> BulkResult:
    """The API's bulk endpoint for the form's action, as ``who``."""
    action = form.get("action", "")
    if action not in ACTIONS:
        raise InvalidInput(f"the action is one of {', '.join(ACTIONS)}")
    try:
        if action == "cancel":
            checked = as_api(request, who, bulk.Canceller)
            asked = bulk.BulkCancel.model_validate(_body(form, confirmed))
            return bulk.bulk_cancel(asked, request, runtime, checked)
        signalled = bulk.BulkSignal.model_validate(_body(form, confirmed))
        return bulk.bulk_signal(
            name=form.get("signal", ""),
            body=signalled,
            request=request,
            runtime=runtime,
            caller=who,
        )
    except ValidationError as exc:
        fields = fields_line(field_errors(exc.errors()))
        raise InvalidInput(f"not a valid bulk action: {fields}") from exc


@router.post("/runs/bulk", response_class=HTMLResponse)
def bulk_action(request: Request, runtime: Runtime_, who: Who, form: Form) -> Response:
    """Without ``confirm``: count the runs the filter selects (nothing done) and ask for
    the confirmation; with it and the count's selection token: act on exactly those."""
    confirmed = form.get("confirm") == "yes"
    fields = dict(form)
    try:
        result = _act(request, runtime, who, form, confirmed)
    except CairnError as exc:
        status = status_of(exc)
        if status in (401, 403, 404):
            raise
        return render(request, "bulk.html", status=status, result=None, form=fields, error=str(exc))
    return render(request, "bulk.html", result=result, form=fields, error=None, shown=SHOWN)
