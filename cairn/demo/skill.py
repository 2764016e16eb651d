"""The demo's agent skill: write a short research brief.

plan → search (three result pages, a cursor in ``ctx.sessions``) → read → outline →
draft → review → publish. Each step takes a moment, appends to the agent's message
history, and writes one line to a ledger file, so the demo can count executions the way
an external system would see them.
"""

from __future__ import annotations

import os
import time
from typing import Any

from cairn.definitions.builder import Workflow

SOURCES = [
    (
        "Durable execution in practice",
        "Checkpoint after every step; resume from the first unfinished one.",
    ),
    ("Idempotency keys", "Carry a business key to the external system so a retry is a no-op."),
    ("Leases and fencing", "A worker that lost its lease must not commit over the new holder."),
    ("Sagas", "Undo completed steps in reverse order when a later one fails."),
    ("Human in the loop", "A waiting run holds rows, not workers."),
    ("Outbox pattern", "Persist the message with the state change; publish after commit."),
]


def _record(ctx: Any, state: dict[str, Any]) -> None:
    """One ledger line per execution: what an external system would count."""
    ledger = state.get("ledger")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as out:
            out.write(f"{ctx.node} {ctx.iteration} {os.getpid()}\n")


def _pause(state: dict[str, Any], seconds: float) -> None:
    deadline = time.monotonic() + seconds * float(state.get("pace", 1.0))
    while time.monotonic() < deadline:
        time.sleep(0.05)


def _step(ctx: Any, state: dict[str, Any], seconds: float) -> None:
    _record(ctx, state)
    _pause(state, seconds)


def plan(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _step(ctx, state, 0.4)
    topic = state.get("topic", "durable workflows for AI agents")
    ctx.messages.append({"role": "user", "content": f"Write a brief on {topic}."})
    ctx.messages.append({"role": "assistant", "content": "Plan: search, read, outline, draft."})
    return {"plan": ["search", "read", "outline", "draft", "review"], "topic": topic}


def search(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _record(ctx, state)
    found: list[str] = []
    for page in range(3):
        _pause(state, 0.25)
        found.extend(title for title, _ in SOURCES[page * 2 : page * 2 + 2])
        ctx.sessions["search"] = {"cursor": page + 1, "pages": 3}
        ctx.progress(page + 1, 3, f"result page {page + 1} of 3")
    ctx.messages.append({"role": "tool", "content": f"{len(found)} sources found"})
    return {"sources": found}


def read(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _step(ctx, state, 0.6)
    notes = {title: summary for title, summary in SOURCES if title in state["sources"]}
    return {"notes": notes}


def outline(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _step(ctx, state, 0.4)
    return {"outline": list(state["notes"])}


def draft(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _step(ctx, state, 1.5)
    body = "\n".join(f"- {title}: {state['notes'][title]}" for title in state["outline"])
    ctx.messages.append({"role": "assistant", "content": "Draft written."})
    return {"draft": f"# {state['topic'].capitalize()}\n{body}"}


def review(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _step(ctx, state, 0.4)
    return {"approved": len(state["draft"]) > 100}


def publish(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _step(ctx, state, 0.3)
    return {"published": f"briefs/{ctx.run_id[:8]}.md"}


research_brief = (
    Workflow(
        "research_brief",
        version=1,
        description="A sequential agent skill: plan, search, read, outline, draft, "
        "review, publish.",
    )
    .task("plan", plan, next="search")
    .task("search", search, next="read")
    .task("read", read, next="outline")
    .task("outline", outline, next="draft")
    .task("draft", draft, next="review")
    .task("review", review, next="publish")
    .task("publish", publish, next="done")
    .end("done")
)

STEPS = ["plan", "search", "read", "outline", "draft", "review", "publish"]
