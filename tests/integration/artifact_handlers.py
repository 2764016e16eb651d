"""Handlers of the ``artifacts`` workflow: they put and read artifacts through
``ctx.artifacts`` and keep a ledger of their executions, as the other handlers do."""

from __future__ import annotations

import os
from typing import Any

from cairn import TransientError


def _record(ctx: Any, state: dict[str, Any], what: str) -> None:
    path = state.get("ledger")
    if path:
        line = f"{ctx.run_id} {ctx.node} {ctx.iteration} {ctx.attempt} {what} {os.getpid()}\n"
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(line)


def draft(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Put a draft; with ``fail_first``, fail transiently on the first attempt after the
    artifact is stored (the model call timed out, say): the retry puts it again."""
    _record(ctx, state, "draft")
    text = f"A draft about {state['topic']}.\n" * int(state.get("repeat", 1))
    ref = ctx.artifacts.put(
        "draft",
        text,
        model="test-model-1",
        params={"temperature": 0.0, "max_tokens": 256},
        prompt_tokens=12,
    )
    if state.get("fail_first") and ctx.attempt == 1:
        raise TransientError("the model call timed out after the draft was stored")
    return {"draft_version": ref["version"]}


def review(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Read the draft back, put a summary of it, and a copy under another name."""
    _record(ctx, state, "review")
    text = ctx.artifacts.text("draft")
    summary = ctx.artifacts.put("summary", text.splitlines()[0].upper(), tool="upper")
    ctx.artifacts.put("draft-copy", text, call_id="copy-1")
    return {"draft_chars": len(text), "summary_sha256": summary["sha256"]}
