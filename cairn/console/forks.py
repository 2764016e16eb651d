"""Fork after a dry run shows the divergence: the run page's form asks the API's fork dry
run (``POST /v1/runs/{id}/fork/dry-run``'s function, as the signed-in principal); its
page sets the dry run's steps beside what the run itself did after the same seq, marks
the first step where they part, and offers the live fork (``POST /v1/runs/{id}/fork``'s)
to whoever may fork. And an artifact's download, for whoever may read payloads."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from cairn.api import lineage, run_views, runs, timeline
from cairn.api.errors import status_of
from cairn.api.models import DryRunRequest, ForkRequest
from cairn.api.scope import RunId
from cairn.console.web import (
    PREFIX,
    ConsoleRoute,
    Form,
    Runtime_,
    Who,
    as_api,
    render,
    see_other,
)
from cairn.errors import CairnError, InvalidInput

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)
# What the run's own log says each execution ended as (the dry run's steps say the same).
ENDINGS = {"node_succeeded": "succeeded", "node_failed": "failed", "node_cancelled": "cancelled"}


def _asked(form: Mapping[str, str]) -> tuple[int, dict[str, Any] | None]:
    """The form's seq and patch, or :class:`InvalidInput` saying what is wrong."""
    seq = form.get("at_seq", "").strip()
    if not seq.isdigit():
        raise InvalidInput("the seq to fork from is a whole number (an event's seq)")
    text = form.get("patch", "").strip()
    try:
        patch = json.loads(text) if text else None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"the patch is not JSON: {exc}") from exc
    if patch is not None and not isinstance(patch, dict):
        raise InvalidInput("the patch is a JSON object ({...}), or nothing")
    return int(seq), patch


def divergence(
    taken: Sequence[Mapping[str, Any]], tried: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], int | None]:
    """The run's own executions after the fork's seq (``taken``: node, status, where the
    run went next) beside the dry run's steps (``tried``), row by row, and the index of
    the first row where they part (None: the same path as far as both go)."""
    rows: list[dict[str, Any]] = []
    parted: int | None = None
    for index in range(max(len(taken), len(tried))):
        was = taken[index] if index < len(taken) else None
        would = tried[index] if index < len(tried) else None
        same = (
            was is not None
            and would is not None
            and (was["node"], was["status"], list(was["transitions"]))
            == (would["node"], would["status"], list(would.get("transitions") or ()))
        )
        if not same and parted is None and was is not None and would is not None:
            parted = index
        rows.append({"was": was, "would": would, "same": same})
    if parted is None and len(taken) != len(tried):
        parted = min(len(taken), len(tried))
    return rows, parted


def _taken_after(events: Sequence[Mapping[str, Any]], seq: int) -> list[dict[str, Any]]:
    """The run's executions after ``seq``, each with where the decider took the run
    (written as a dry run's step writes it: ``act -case:false-> think``)."""
    return [
        {
            "node": e["data"].get("node"),
            "status": ENDINGS[e["type"]],
            "seq": e["seq"],
            "transitions": [
                f"{source} -{label}-> {target}"
                for source, label, target in (e.get("outcome") or {}).get("transitions", [])
            ],
        }
        for e in events
        if e["seq"] > seq and e["type"] in ENDINGS and e["data"].get("phase", "run") == "run"
    ]


@router.post("/runs/{run_id}/fork/dry-run", response_class=HTMLResponse)
def fork_dry_run(
    request: Request, run_id: RunId, runtime: Runtime_, who: Who, form: Form
) -> Response:
    """Run the fork dry (nothing written, nothing sent outside) and show where it goes
    another way than the run went; then, for whoever may fork, the live fork's form."""
    checked = as_api(request, who, timeline.DryRunner)
    detail = run_views.get_run(run_id, runtime, who)
    try:
        seq, patch = _asked(form)
        body = DryRunRequest(at_seq=seq, patch=patch)
        report = timeline.dry_run_fork(run_id, body, request, runtime, checked)
    except ValidationError as exc:
        return _again(request, detail, form, "; ".join(e["msg"] for e in exc.errors()), 422)
    except CairnError as exc:
        if status_of(exc) in (401, 403, 404):
            raise
        return _again(request, detail, form, str(exc), status_of(exc))
    events = run_views.run_events(run_id, runtime, who, after=0, limit=1000).events
    rows, parted = divergence(_taken_after(events, seq), report.steps)
    return render(
        request,
        "fork.html",
        run=detail,
        report=report,
        rows=rows,
        parted=parted,
        at_seq=seq,
        patch=form.get("patch", "").strip(),
        error=None,
    )


def _again(
    request: Request, detail: Any, form: Mapping[str, str], message: str, status: int
) -> Response:
    """The fork page with why the dry run was not made (nothing was run)."""
    return render(
        request,
        "fork.html",
        status=status,
        run=detail,
        report=None,
        rows=[],
        parted=None,
        at_seq=form.get("at_seq", ""),
        patch=form.get("patch", ""),
        error=message,
    )


@router.post("/runs/{run_id}/fork", response_class=HTMLResponse)
def fork(request: Request, run_id: RunId, runtime: Runtime_, who: Who, form: Form) -> Response:
    """Start the fork for real (confirmed on the dry run's page): its page next."""
    checked = as_api(request, who, runs.Forker)
    seq, patch = _asked(form)
    try:
        body = ForkRequest(at_seq=seq, patch=patch, confirm=form.get("confirm") == "yes")
    except ValidationError as exc:
        raise InvalidInput("; ".join(e["msg"] for e in exc.errors())) from exc
    started = runs.fork_run(
        run_id=run_id,
        body=body,
        request=request,
        response=Response(),
        runtime=runtime,
        who=checked,
    )
    return see_other(f"{PREFIX}/runs/{started.run_id}")


@router.get("/runs/{run_id}/artifacts/content")
def artifact_download(
    *,
    request: Request,
    run_id: RunId,
    runtime: Runtime_,
    who: Who,
    name: Annotated[str, Query(min_length=1, max_length=200)],
    version: Annotated[int, Query(ge=1, le=2_147_483_647)],
) -> Response:
    """An artifact's content, as ``GET /v1/runs/{id}/artifacts/content`` serves it:
    payloads, so only with the permission, and audited."""
    checked = as_api(request, who, lineage.ContentReader)
    return lineage.artifact_content(run_id, name, version, runtime, checked)
