"""A weekly report declared with decorators: three sub-reports in parallel, then a
compose step that a reviewer guard may send back for a bounded number of revisions.

Each task is declared on the handler it runs (``@weekly_report.task(...)``, the node id
is the function's name); the nodes that run no handler of their own — the fan-out, the
review, the end — are declared beside them. The same workflow could be written with the
builder (``cairn.Workflow``) or as YAML: all three compile to the same definition (see
docs/definitions.md).

The sub-report handlers stand in for queries against a sales database, a web analytics
API and a ticketing system.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import cairn

if TYPE_CHECKING:
    from cairn import State, StepContext

SALES_EUR = {"2026-W47": [1200, 980, 1430, 1610, 1725], "2026-W48": [1510, 1220, 1675]}
VISITS = {"2026-W47": [5400, 6100, 5800, 6900, 7100], "2026-W48": [6200, 5900, 6400]}
TICKETS = {"2026-W47": {"opened": 41, "closed": 38}, "2026-W48": {"opened": 35, "closed": 37}}
SUB_REPORT_RETRY = {"attempts": 3, "backoff": "1s"}

weekly_report = cairn.workflow(
    "weekly_report",
    version=1,
    description="Three sub-reports in parallel, composed, reviewed and published.",
    # What a run may be started with: refused at submit (422 invalid_input) otherwise.
    input={
        "type": "object",
        "properties": {
            "week": {"type": "string", "pattern": "^[0-9]{4}-W[0-9]{2}$"},
        },
        "additionalProperties": False,
    },
)


@weekly_report.task(next="sub_reports")  # the first node declared: the start
def collect(ctx: StepContext, state: State) -> State:
    return {"week": state.get("week", "2026-W48"), "revision": 0}


weekly_report.parallel(
    "sub_reports",
    ["sales", "traffic", "tickets"],
    join={"policy": "all", "timeout": "10m"},
    next="compose",
)


@weekly_report.task(retry=SUB_REPORT_RETRY)  # no edge: a branch of sub_reports
def sales(ctx: StepContext, state: State) -> State:
    days = SALES_EUR.get(state["week"], [])
    return {"sales": {"total_eur": sum(days), "days": len(days)}}


@weekly_report.task(retry=SUB_REPORT_RETRY)
def traffic(ctx: StepContext, state: State) -> State:
    days = VISITS.get(state["week"], [])
    return {"traffic": {"visits": sum(days), "daily_avg": sum(days) // max(len(days), 1)}}


@weekly_report.task(retry=SUB_REPORT_RETRY)
def tickets(ctx: StepContext, state: State) -> State:
    return {"tickets": TICKETS.get(state["week"], {"opened": 0, "closed": 0})}


@weekly_report.task(next="review", max_visits=3)
def compose(ctx: StepContext, state: State) -> State:
    revision = int(state.get("revision", 0)) + 1
    lines = [
        f"Weekly report {state['week']} (revision {revision})",
        f"Sales: {state['sales']['total_eur']} EUR over {state['sales']['days']} days",
        f"Traffic: {state['traffic']['visits']} visits ({state['traffic']['daily_avg']}/day)",
        f"Tickets: {state['tickets']['opened']} opened, {state['tickets']['closed']} closed",
    ]
    return {"report": "\n".join(lines), "revision": revision}


def is_complete(state: State) -> bool:
    """The reviewer: a report over a week with no sales data goes back for a revision."""
    return bool(state["sales"]["days"] > 0 or state["revision"] >= 3)


weekly_report.node(
    "review", branch={"guard": is_complete, "cases": {True: "publish", False: "compose"}}
)


@weekly_report.task(next="done")
def publish(ctx: StepContext, state: State) -> State:
    return {"published": f"reports/{state['week']}.txt"}


@weekly_report.compensation("publish")  # if the run fails after publish succeeded
def unpublish(ctx: StepContext, state: State) -> State:
    return {"published": None}


weekly_report.end("done")
