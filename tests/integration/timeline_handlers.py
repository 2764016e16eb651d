"""Handlers for the timeline tests. Each notes what it was given — the digest of its
``ctx.state``, as ``cairn history`` computes inputs digests — in a JSON-lines file the
test reads (``state["observed"]``), so "what the live run saw" is told by the handlers,
not by cairn."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from cairn import TransientError
from cairn.timetravel.steps import digest


def _observe(ctx: Any, state: dict[str, Any]) -> int:
    """Note this execution; return how many executions of this visit were noted before."""
    path = state.get("observed")
    if not path:
        return 0
    before = 0
    if os.path.exists(path):
        with open(path, encoding="utf-8") as observed:
            for line in observed:
                seen = json.loads(line)
                before += (seen["run_id"], seen["node"], seen["iteration"]) == (
                    ctx.run_id,
                    ctx.node,
                    ctx.iteration,
                )
    entry = {
        "run_id": ctx.run_id,
        "node": ctx.node,
        "iteration": ctx.iteration,
        "attempt": ctx.attempt,
        "inputs_digest": digest(dict(ctx.state)),
        "pid": os.getpid(),
    }
    with open(path, "a", encoding="utf-8") as observed:
        observed.write(json.dumps(entry) + "\n")
        observed.flush()
        os.fsync(observed.fileno())
    return before


def tick(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _observe(ctx, state)
    count = int(state.get("count", 0)) + 1
    debit = 1000 if count == state.get("bad_at") else 0
    return {"count": count, "balance": int(state.get("balance", 0)) + 10 - debit}


def more(state: dict[str, Any]) -> bool:
    return int(state["count"]) < int(state.get("steps", 64))


def balance_ok(state: dict[str, Any]) -> bool:
    """The bisect predicate: the account is never overdrawn."""
    return int(state["vars"].get("balance", 0)) >= 0


def always(state: dict[str, Any]) -> bool:
    return True


def never(state: dict[str, Any]) -> bool:
    return False


def broken(state: dict[str, Any]) -> bool:
    return bool(state["vars"]["no_such_field"])


def prepare(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _observe(ctx, state)
    ctx.messages.append({"role": "tool", "content": "order prepared"})
    return {"order": {"id": 42, "items": ["tea", "cups"]}, "total": 0}


def fetch(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _observe(ctx, state)
    if ctx.attempt == 1:
        raise TransientError("upstream 503")
    return {"order": {**state["order"], "items": [*state["order"]["items"], "pot"]}, "unit": 7}


def price(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Slow on its first execution only, so that a test can kill its worker there."""
    first = _observe(ctx, state) == 0
    deadline = time.monotonic() + (float(state.get("slow_s", 0)) if first else 0.0)
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return {"total": int(state["unit"]) * len(state["order"]["items"])}


def finish(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _observe(ctx, state)
    return {"receipt": f"r-{state['order']['id']}", "total": state["total"]}
