"""The runs page (which runs, filtered, a keyset page at a time, with the count per
status) and the inbox (what waits for the signed-in principal, oldest first). Both read
through the API's own endpoints' functions, as the signed-in principal."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from cairn.api import run_views
from cairn.console.web import PREFIX, ConsoleRoute, Runtime_, Who, render, see_other
from cairn.decider.signal_received import may_decide
from cairn.errors import InvalidInput
from cairn.model.principals import Permission, Principal
from cairn.model.selection import RunFilter
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)
PAGE = 50
# Counts beside the list are exact up to this, then "10,000+": each costs at most this
# many index entries, however many runs there are.
COUNT_CAP = 10_000
INBOX_MAX = 500
SINCE = {"hour": 3600.0, "day": 86400.0, "week": 7 * 86400.0, "month": 30 * 86400.0}


@router.get("")
def home() -> Response:
    return see_other(f"{PREFIX}/")


@router.get("/")
def front(who: Who) -> Response:
    """The inbox for whoever may decide something; the runs for everyone else."""
    return see_other(f"{PREFIX}/inbox" if who.may(Permission.APPROVE) else f"{PREFIX}/runs")


def mine(entry: dict[str, Any], who: Principal) -> bool:
    """Whether ``who`` may answer the wait ``entry`` (a held node: an operator's)."""
    if entry.get("held"):
        return who.may(Permission.RECOVER)
    approvers = tuple(entry.get("approvers") or ())
    return who.may(Permission.APPROVE) and (
        not approvers or may_decide(approvers, who.actor, who.role.value)
    )


def waiting_for(runtime: Runtime, who: Principal) -> list[dict[str, Any]]:
    """What waits for ``who``, oldest first (``GET /v1/waiting``'s, narrowed to it)."""
    found = run_views.list_waiting(runtime=runtime, who=who, limit=INBOX_MAX).waiting
    return [entry for entry in found if mine(entry, who)]


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    *,
    request: Request,
    runtime: Runtime_,
    who: Who,
    status: Annotated[list[str] | None, Query(max_length=20)] = None,
    workflow: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[str | None, Query(max_length=10)] = None,
    waiting_for_me: Annotated[str | None, Query(alias="mine", max_length=5)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    """Which runs: by status, workflow, age, or waiting for me; newest first."""
    statuses = _statuses(status or [])
    after = time.time() - SINCE[since] if since in SINCE else None
    ids: tuple[str, ...] = ()
    if waiting_for_me:
        ids = tuple(dict.fromkeys(e["run_id"] for e in waiting_for(runtime, who))) or ("-",)
    selection = RunFilter(
        statuses=statuses, workflow=workflow or None, created_after=after, ids=ids
    )
    page = run_views.list_runs(
        runtime=runtime, who=who, selection=selection, limit=PAGE, cursor=cursor or None
    )
    with runtime.store.reading() as tx:  # beside the list: what each status would choose
        found = tx.run_counts(who.namespace, replace(selection, statuses=()), cap=COUNT_CAP)
    counts = {status.value: _shown(count) for status, count in found.items()}
    kept = [
        (key, value)
        for key, value in request.query_params.multi_items()
        if key in ("status", "workflow", "since", "mine")
    ]
    return render(
        request,
        "runs.html",
        runs=page.runs,
        next_cursor=page.next_cursor,
        counts=counts,
        total=sum(min(count, COUNT_CAP) for count in found.values()),
        more=any(count > COUNT_CAP for count in found.values()),
        all_statuses=[s.value for s in RunStatus],
        chosen={s.value for s in statuses},
        workflow=workflow or "",
        since=since or "",
        mine=bool(waiting_for_me),
        kept=kept,
        created_after=after,
        bulk_actions=_bulk_actions(who),
    )


def _bulk_actions(who: Principal) -> list[str]:
    """The bulk actions ``who`` may take (the API's bulk endpoints' permissions)."""
    if not who.may(Permission.BULK):
        return []
    may_signal = who.may(Permission.APPROVE) or who.may(Permission.RECOVER)
    return [
        *(["cancel"] if who.may(Permission.CANCEL) else []),
        *(["signal"] if may_signal else []),
    ]


def _statuses(given: list[str]) -> tuple[RunStatus, ...]:
    try:
        return tuple(dict.fromkeys(RunStatus(value) for value in given if value))
    except ValueError as exc:
        known = ", ".join(s.value for s in RunStatus)
        raise InvalidInput(f"status: one of {known}") from exc


@router.get("/inbox", response_class=HTMLResponse)
def inbox(request: Request, runtime: Runtime_, who: Who) -> Response:
    """What waits for me — a decision, or (an operator) a held node — oldest first, with
    the context its wait shows whoever decides it."""
    entries = waiting_for(runtime, who)
    heads: dict[str, Any] = {}
    with runtime.store.reading() as tx:
        for entry in entries:
            run_id = entry["run_id"]
            if run_id not in heads:
                heads[run_id] = tx.run(run_id)
    return render(request, "inbox.html", entries=entries, heads=heads)


def _shown(count: int) -> str:
    return f"{COUNT_CAP:,}+" if count > COUNT_CAP else f"{count:,}"
