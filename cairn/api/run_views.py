"""``/v1/runs``, read: a run, the namespace's runs (filtered, a page at a time), a
run's events and its artifacts. A caller that may not read payloads gets them without.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from cairn.api.access import Reader
from cairn.api.deps import Runtime_, storable
from cairn.api.models import MAX_INT
from cairn.api.redact import event_for, reason_for
from cairn.api.scope import ERRORS, RunId, head_in, status_url, visible
from cairn.api.selection import run_filter
from cairn.decider.signal_received import may_decide
from cairn.engine.awaiting import awaiting
from cairn.errors import RunNotFound
from cairn.http.models import (
    ArtifactList,
    EventPage,
    Progress,
    RunCounts,
    RunDetail,
    RunPage,
    RunSummary,
    StatusCount,
    WaitingList,
)
from cairn.lease.heartbeat import beat_view, run_beats
from cairn.model.awaiting import Awaiting
from cairn.model.definition import TaskNode
from cairn.model.principals import Permission, Principal
from cairn.model.selection import RunFilter, cursor_position, page_cursor
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.observe.explain import context_lines, waiting_lines
from cairn.store.artifacts import ArtifactRegistry
from cairn.store.records import EventRecord, ListedRun, to_epoch

router = APIRouter(prefix="/v1")
EVENTS_PAGE_MAX = 1000
COUNT_CAP = 10_000  # a count reads at most this many index entries per status


@router.get("/runs/counts", response_model=RunCounts, responses=ERRORS)
def count_runs(
    *,
    runtime: Runtime_,
    who: Reader,
    selection: Annotated[RunFilter, Depends(run_filter)],
    cap: Annotated[
        int, Query(ge=1, le=COUNT_CAP, description="Count each status up to this.")
    ] = COUNT_CAP,
) -> RunCounts:
    """How many of the namespace's runs the filters (those of ``GET /v1/runs``) select,
    by status: exact up to ``cap``, then "more" — as long to answer at a million runs as
    at ten thousand."""
    with runtime.store.reading() as tx:
        found = tx.run_counts(who.namespace, selection, cap=cap)
    return RunCounts(
        counts={
            status.value: StatusCount(count=min(count, cap), more=count > cap)
            for status, count in found.items()
        },
        cap=cap,
    )


@router.get("/runs/{run_id}", response_model=RunDetail, responses=ERRORS)
def get_run(run_id: RunId, runtime: Runtime_, who: Reader) -> RunDetail:
    """A run: status, where it is, progress, liveness of its running nodes, its last
    event, its state, and in words why it waits. Without the payloads permission: no
    vars, no result, no error or progress messages."""
    orchestrator = runtime.orchestrator
    view = orchestrator.get_run(run_id, with_executions=True)
    if view.namespace != who.namespace:
        raise RunNotFound(f"no run {run_id}")
    payloads = who.may(Permission.PAYLOADS)
    state = view.state
    assert state is not None  # get_run always restores it
    definition = orchestrator.registry.get(view.workflow_ref, view.version)
    beats = run_beats(runtime.leases, run_id, state.running)
    with runtime.store.reading() as tx:
        last = tx.events_after(run_id, view.last_seq - 1, upto=view.last_seq)
        notifications = tx.notifications_of(run_id)
    tasks = {name for name, node in definition.nodes.items() if isinstance(node, TaskNode)}
    done = {n.node for n in state.nodes.values() if n.status is NodeStatus.SUCCEEDED}
    return RunDetail(
        id=view.id,
        namespace=view.namespace,
        workflow_namespace=view.workflow_namespace,
        priority=view.priority,
        workflow=view.workflow,
        version=view.version,
        status=view.status.value,
        request_id=view.request_id,
        current=view.current,
        reason=reason_for(view.reason, payloads),
        last_seq=view.last_seq,
        created_at=view.created_at,
        updated_at=view.updated_at,
        parent_run_id=view.parent_run_id,
        fork_seq=view.fork_seq,
        build=view.build,
        waiting_for_build=view.waiting_for_build,
        webhooks=[_delivery(row) for row in notifications],
        nodes={name: node.status.value for name, node in state.nodes.items()},
        visits=dict(state.visits),
        progress=Progress(steps=state.steps, done=len(done & tasks), total=len(tasks)),
        heartbeats={
            execution: _beat(beat, payloads) if beat is not None else None
            for execution, beat in beats.items()
        },
        heartbeat_interval_s=runtime.settings.heartbeat_interval,
        last_event=({"seq": last[0].seq, "type": last[0].type, "at": last[0].at} if last else None),
        vars=state.vars if payloads else None,
        result=state.vars if payloads and view.status is RunStatus.SUCCEEDED else None,
        waiting=[_waiting(entry, who, payloads) for entry in awaiting(definition, state)],
        explain=waiting_lines(definition, state, time.time(), payloads=payloads)
        + context_lines(definition, state, payloads=payloads),
        executions=[_execution(entry, payloads) for entry in view.executions],
        links={
            "self": status_url(run_id),
            "events": f"{status_url(run_id)}/events",
            "stream": f"{status_url(run_id)}/stream",
            "artifacts": f"{status_url(run_id)}/artifacts",
        },
    )


def _execution(entry: Mapping[str, Any], payloads: bool) -> dict[str, Any]:
    shown = dict(entry)
    if not payloads:
        shown["error"] = None  # the handler's words: they quote what it failed on
    return shown


@router.get("/waiting", response_model=WaitingList, responses=ERRORS)
def list_waiting(
    runtime: Runtime_,
    who: Reader,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many runs.")] = 100,
) -> WaitingList:
    """The namespace's runs waiting for a person — a wait's signal, an operator's decision
    about a held node — longest waiting first, with what would answer each (as ``cairn
    waiting``). A wait's context only to whoever may decide it, or read payloads."""
    found = runtime.orchestrator.waiting(who.namespace, limit)
    payloads = who.may(Permission.PAYLOADS)
    return WaitingList(waiting=[_waiting(entry, who, payloads) for entry in found])


def _waiting(entry: Awaiting, who: Principal, payloads: bool) -> dict[str, Any]:
    """A wait as ``who`` sees it: its context (what the author chose to show whoever
    decides it) only to whoever may decide it, or may read payloads."""
    shown = entry.to_dict()
    decides = who.may(Permission.APPROVE) and (
        not entry.approvers or may_decide(entry.approvers, who.actor, who.role.value)
    )
    if not (payloads or decides):
        shown["context"] = None
    return shown


def _beat(beat: Mapping[str, Any], payloads: bool) -> dict[str, Any]:
    shown = beat_view(beat)
    if not payloads:
        shown["message"] = None  # the handler's words: they may quote what it works on
    return shown


def _delivery(row: Any) -> dict[str, Any]:
    """A webhook notification as the run's owner sees it: delivered, pending (when it is
    tried next) or given up, with the receiver's last answer."""
    state = "delivered" if row.delivered_at else "given_up" if row.given_up_at else "pending"
    return {
        "event_id": row.event_id,
        "type": row.kind,
        "state": state,
        "attempts": row.attempts,
        "next_attempt_at": to_epoch(row.due_at) if state == "pending" else None,
        "last_status": row.last_status,
        "last_error": row.last_error,
    }


@router.get("/runs", response_model=RunPage, responses=ERRORS)
def list_runs(
    *,
    runtime: Runtime_,
    who: Reader,
    selection: Annotated[RunFilter, Depends(run_filter)],
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=200, description="next_cursor of the previous page.")
    ] = None,
) -> RunPage:
    """The namespace's runs the filters select, newest first, a page at a time."""
    before = cursor_position(cursor) if cursor else None
    with runtime.store.reading() as tx:
        rows = tx.runs_page(
            who.namespace,
            selection,
            limit=limit + 1,  # one more tells whether there is a next page
            before=before,
        )
    page = rows[:limit]
    last = page[-1] if page else None
    next_cursor = page_cursor(last.created_at, last.id) if last and len(rows) > limit else None
    payloads = who.may(Permission.PAYLOADS)
    return RunPage(runs=[_summary(row, payloads) for row in page], next_cursor=next_cursor)


def _summary(row: ListedRun, payloads: bool) -> RunSummary:
    shown = row.to_summary()
    shown["reason"] = reason_for(row.reason, payloads)
    return RunSummary(**shown)


@router.get("/runs/{run_id}/events", response_model=EventPage, responses=ERRORS)
def run_events(
    run_id: RunId,
    runtime: Runtime_,
    who: Reader,
    after: Annotated[int, Query(ge=0, le=MAX_INT, description="Only events after this seq.")] = 0,
    limit: Annotated[int, Query(ge=1, le=EVENTS_PAGE_MAX)] = EVENTS_PAGE_MAX,
) -> EventPage:
    """The run's event log after ``after``, oldest first (the history is append-only:
    a page once read never changes). Without the payloads permission, each event without
    its payload fields (docs/access.md)."""
    with runtime.store.reading() as tx:
        visible(tx.run_head(run_id), run_id, who.namespace)
        rows = tx.events_after(run_id, after, upto=after + limit)
    payloads = who.may(Permission.PAYLOADS)
    events = [event_for(event_dict(row), payloads) for row in rows]
    return EventPage(events=events, next_after=events[-1]["seq"] if events else after)


def event_dict(row: EventRecord) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "type": row.type,
        "at": row.at,
        "data": row.data,
        "outcome": row.outcome,
    }


@router.get("/runs/{run_id}/artifacts", response_model=ArtifactList, responses=ERRORS)
def run_artifacts(
    run_id: RunId,
    runtime: Runtime_,
    who: Reader,
    name: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> ArtifactList:
    """Every registered artifact version of the run (of ``name`` only, if given), with
    its reference and provenance. The content stays in the object store."""
    head_in(runtime, run_id, who.namespace)
    found = ArtifactRegistry(runtime.store).versions(run_id, storable(name, "name"))
    return ArtifactList(artifacts=[info.to_dict() for info in found])
