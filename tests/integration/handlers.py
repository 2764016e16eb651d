"""Handlers for the integration workflows. They keep their own ledger — a file the test
reads — so that "executed exactly once" is counted by the handler, not by cairn."""

from __future__ import annotations

import os
import time
from typing import Any


def _record(ctx: Any, state: dict[str, Any], what: str) -> None:
    path = state.get("ledger")
    if not path:
        return
    line = f"{ctx.run_id} {ctx.node} {ctx.iteration} {ctx.attempt} {what} {os.getpid()}\n"
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(line)
        ledger.flush()
        os.fsync(ledger.fileno())


def _runs_before(ctx: Any, state: dict[str, Any]) -> int:
    path = state.get("ledger")
    if not path or not os.path.exists(path):
        return 0
    prefix = f"{ctx.run_id} {ctx.node} {ctx.iteration} "
    with open(path, encoding="utf-8") as ledger:
        return sum(line.startswith(prefix) for line in ledger)


def step(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One step of a chain: record the execution, maybe dawdle, return a marker.

    ``state["slow"][node]`` seconds are spent on the node's first execution only, so a
    test can kill a worker mid-node and see the re-execution finish promptly.
    """
    first = _runs_before(ctx, state) == 0
    _record(ctx, state, "start")
    delay = float((state.get("slow") or {}).get(ctx.node, 0)) if first else 0.0
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        time.sleep(0.05)
    ctx.messages.append({"role": "tool", "content": f"{ctx.node} done"})
    return {ctx.node: ctx.iteration, "last": ctx.node}


def is_even(state: dict[str, Any]) -> bool:
    return int(state.get("number", 0)) % 2 == 0


def countdown(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A loop body that asks to stop looping on its second visit."""
    _record(ctx, state, "start")
    return {"kind": "plain" if ctx.iteration >= 2 else "loop", "loops": ctx.iteration}


def paging(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Reads three pages slowly, reporting progress after each (the first execution only)."""
    first = _runs_before(ctx, state) == 0
    _record(ctx, state, "start")
    for page in range(1, 4):
        ctx.progress(page, 3, f"page {page}")
        time.sleep(float(state.get("page_s", 0.5)) if first else 0.0)
    return {"pages": 3}


def die(ctx: Any, state: dict[str, Any]) -> None:
    """A poison node: it kills its own worker process, every time."""
    _record(ctx, state, "start")
    os._exit(1)


def plan_still_valid(ctx: Any, state: dict[str, Any]) -> str | None:
    """The on_resume check: a plan made before an interruption is stale, once."""
    return None if state.get("replanned") else f"{ctx.node} was interrupted; the plan is stale"


def replan(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _record(ctx, state, "start")
    return {"replanned": True, "slow": {}}
