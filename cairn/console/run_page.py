"""A run's page: where it is (the graph, each node's state), how its time went (the
timeline as a waterfall), what happened (events, decisions), what it called (model
calls), what it did outside (effects), where it came from (lineage) — and, on a page of
its own, its state at a seq and the diff between two. Everything is read through the
API's functions as the signed-in principal: what it may not read is not on the page.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from cairn.api import lineage, model_calls, repair, run_views, timeline
from cairn.api.access import draft_of
from cairn.api.scope import RunId
from cairn.console.graph import layout
from cairn.console.pages import mine
from cairn.console.waterfall import bars
from cairn.console.web import PREFIX, ConsoleRoute, Runtime_, Who, as_api, render
from cairn.model.events import EVENT_TYPES
from cairn.model.principals import Permission
from cairn.model.statuses import RunStatus
from cairn.model.workflow_names import qualified

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)
MAX = 2_147_483_647


def run_context(
    request: Request, runtime: Runtime_, who: Who, run_id: str, *, live: bool = False
) -> dict[str, Any]:
    """What the run page shows; ``live``: what its live refresh re-renders (not the model
    calls: each read of them is an audited payload read)."""
    detail = run_views.get_run(run_id, runtime, who)
    orchestrator = runtime.orchestrator
    definition = orchestrator.registry.get(
        qualified(detail.workflow_namespace, detail.workflow), detail.version
    )
    history = timeline.run_history(run_id, runtime, who)
    events = run_views.run_events(run_id, runtime, who, after=0, limit=1000).events
    effects = repair.run_effects(run_id, runtime, who).effects
    calls: list[dict[str, Any]] | None = None
    if who.may(Permission.PAYLOADS) and not live:  # payloads: audited as the API does
        kept = draft_of(request)  # an action's own entry, when the page shows its refusal
        as_api(request, who, model_calls.PayloadReader)
        calls = model_calls.run_model_calls(run_id, runtime, who, node=None).calls
        if kept is not None:
            request.state.audit = kept
    children = list(
        dict.fromkeys(
            str(e["data"]["child_run_id"]) for e in events if e["data"].get("child_run_id")
        )
    )
    decisions = [e for e in events if e["type"] == "signal_received"]
    return {
        **({} if live else _outputs(runtime, who, run_id)),
        "run": detail,
        "graph": layout(definition, _shown_states(detail.nodes, detail.heartbeats)),
        # On the run's time axis up to now while it goes on (a wait is time too).
        "waterfall": bars(
            history.steps,
            detail.created_at,
            detail.updated_at if RunStatus(detail.status).terminal else time.time(),
        ),
        "history": history,
        "events": events,
        "decisions": decisions,
        "effects": effects,
        "calls": calls,
        "children": children,
        "waits": [w for w in detail.waiting if mine(w, who)],
        "schemas": {
            f"{w['node']}:{name}": _schema(definition, w["node"], name)
            for w in detail.waiting
            for name in w["signals"]
        },
        "pretty": _pretty,
        "event_types": " ".join(EVENT_TYPES),
    }


def _outputs(runtime: Runtime_, who: Who, run_id: str) -> dict[str, Any]:
    """What the page shows as it was loaded, not live: the run's artifacts, the anomalies
    its watch caught (with their scenes, for whoever reads payloads), its forks."""
    return {
        "artifacts": run_views.run_artifacts(run_id, runtime, who).artifacts,
        "anomalies": lineage.run_anomalies(run_id, runtime, who).anomalies,
        "forks": lineage.run_forks(run_id, runtime, who).forks,
    }


def _shown_states(nodes: dict[str, str], beats: dict[str, Any]) -> dict[str, str]:
    """Each node's state; a scheduled node whose execution a worker beats for: running."""
    running = {label.rpartition("#")[0] for label, beat in beats.items() if beat}
    return {
        name: "running" if state == "scheduled" and name in running else state
        for name, state in nodes.items()
    }


def _schema(definition: Any, node: str, signal: str) -> str | None:
    response = getattr(definition.nodes.get(node), "response", None) or {}
    found = response.get(signal)
    return None if found is None else json.dumps(found, indent=2, sort_keys=True)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: RunId, runtime: Runtime_, who: Who) -> Response:
    return render(request, "run.html", **run_context(request, runtime, who, run_id))


@router.get("/runs/{run_id}/live", response_class=HTMLResponse)
def run_live(request: Request, run_id: RunId, runtime: Runtime_, who: Who) -> Response:
    """The run page's live parts, re-rendered for the page's script to swap in."""
    context = run_context(request, runtime, who, run_id, live=True)
    return render(request, "run_fragment.html", **context)


@router.get("/runs/{run_id}/state", response_class=HTMLResponse)
def state_page(
    *,
    request: Request,
    run_id: RunId,
    runtime: Runtime_,
    who: Who,
    at: Annotated[int | None, Query(ge=1, le=MAX)] = None,
    from_seq: Annotated[int | None, Query(alias="from", ge=1, le=MAX)] = None,
    to_seq: Annotated[int | None, Query(alias="to", ge=1, le=MAX)] = None,
) -> Response:
    """The run's state after event ``at`` (default: now), and what changed from ``from``
    to ``to`` — payloads: the permission is checked and the read audited, as the API's."""
    detail = run_views.get_run(run_id, runtime, who)
    as_api(request, who, timeline.StateReader)
    state = timeline.run_state(run_id, runtime, who, at=at)
    diff = None
    if from_seq is not None and to_seq is not None:
        as_api(request, who, timeline.DiffReader)
        diff = timeline.run_diff(run_id, runtime, who, from_seq=from_seq, to_seq=to_seq)
    return render(
        request,
        "state.html",
        run=detail,
        state=state,
        diff=diff,
        pretty=_pretty,
        from_seq=from_seq,
        to_seq=to_seq,
    )
