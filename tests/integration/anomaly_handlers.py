"""Handlers of the anomaly workflows: an agent that plans the same thing over and over
(unless asked to make progress), and writes down whether it saw cairn's hint."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.handlers import _record


def think(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _record(ctx, state, "start")
    hints = [m for m in ctx.messages if m.get("cairn") == "anomaly"]
    seen = dict(state.get("hints_seen_at") or {})
    if hints and not seen:
        seen = {"visit": ctx.iteration, "content": hints[-1]["content"]}
    query = f"draft {ctx.iteration}" if state.get("progress") else "the same query"
    ctx.messages.append(
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "search", "arguments": json.dumps({"q": query})}}],
        }
    )
    # Only plan and answer are the fingerprint (the workflow says so): the bookkeeping
    # below changes every visit and is not progress.
    return {
        "plan": query,
        "hints_seen": len(hints),
        "hints_seen_at": seen,
        "visits": ctx.iteration,
    }


def act(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _record(ctx, state, "start")
    if state.get("progress") and ctx.iteration >= int(state.get("answer_after", 6)):
        return {"answer": f"found after {ctx.iteration} rounds"}
    return {}


def answered(state: dict[str, Any]) -> bool:
    return "answer" in state
