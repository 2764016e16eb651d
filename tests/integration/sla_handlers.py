"""Handlers of the SLA workflow: steps that time their model and tool calls with
``ctx.timed`` and charge tokens, one of which can fail transiently or for good."""

from __future__ import annotations

import time
from typing import Any

from cairn import PermanentError, TransientError


def plan(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A model call, then a little bookkeeping of its own (the step's "other" time)."""
    with ctx.timed("model"):
        time.sleep(float(state.get("model_s", 0.05)))
    ctx.charge(tokens=int(state.get("tokens", 100)))
    time.sleep(0.01)
    return {"planned": True}


def search(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A tool call, which fails transiently before attempt ``succeed_on`` and for good
    with ``permanent`` set."""
    with ctx.timed("tool", name="search"):
        time.sleep(float(state.get("tool_s", 0.03)))
    if state.get("permanent"):
        raise PermanentError("the index is gone")
    if ctx.attempt < int(state.get("succeed_on", 1)):
        raise TransientError(f"search 503 on attempt {ctx.attempt}")
    return {"found": ctx.attempt}
