"""A weekly report built with the Python builder: three sub-reports in parallel, then a
compose step that a reviewer guard may send back for a bounded number of revisions.

The sub-report handlers stand in for queries against a sales database, a web analytics
API and a ticketing system.
"""

from __future__ import annotations

from typing import Any

from cairn import Workflow

SALES_EUR = {"2026-W47": [1200, 980, 1430, 1610, 1725], "2026-W48": [1510, 1220, 1675]}
VISITS = {"2026-W47": [5400, 6100, 5800, 6900, 7100], "2026-W48": [6200, 5900, 6400]}
TICKETS = {"2026-W47": {"opened": 41, "closed": 38}, "2026-W48": {"opened": 35, "closed": 37}}


def collect(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"week": state.get("week", "2026-W48"), "revision": 0}


def sales(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    days = SALES_EUR.get(state["week"], [])
    return {"sales": {"total_eur": sum(days), "days": len(days)}}


def traffic(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    days = VISITS.get(state["week"], [])
    return {"traffic": {"visits": sum(days), "daily_avg": sum(days) // max(len(days), 1)}}


def tickets(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"tickets": TICKETS.get(state["week"], {"opened": 0, "closed": 0})}


def compose(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    revision = int(state.get("revision", 0)) + 1
    lines = [
        f"Weekly report {state['week']} (revision {revision})",
        f"Sales: {state['sales']['total_eur']} EUR over {state['sales']['days']} days",
        f"Traffic: {state['traffic']['visits']} visits ({state['traffic']['daily_avg']}/day)",
        f"Tickets: {state['tickets']['opened']} opened, {state['tickets']['closed']} closed",
    ]
    return {"report": "\n".join(lines), "revision": revision}


def is_complete(state: dict[str, Any]) -> bool:
    """The reviewer: a report over a week with no sales data goes back for a revision."""
    return state["sales"]["days"] > 0 or state["revision"] >= 3


def publish(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"published": f"reports/{state['week']}.txt"}


def unpublish(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"published": None}


weekly_report = (
    Workflow(
        "weekly_report",
        version=1,
        description="Three sub-reports in parallel, composed, reviewed and published.",
    )
    .task("collect", collect, next="sub_reports")
    .parallel(
        "sub_reports",
        ["sales", "traffic", "tickets"],
        join={"policy": "all", "timeout": "10m"},
        next="compose",
    )
    .task("sales", sales, retry={"attempts": 3, "backoff": "1s"})
    .task("traffic", traffic, retry={"attempts": 3, "backoff": "1s"})
    .task("tickets", tickets, retry={"attempts": 3, "backoff": "1s"})
    .task("compose", compose, next="review", max_visits=3)
    .task("review", branch={"guard": is_complete, "cases": {True: "publish", False: "compose"}})
    .task("publish", publish, next="done", compensate=unpublish)
    .end("done")
)
