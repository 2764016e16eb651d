"""Handlers for ``examples/research_agent.yaml``: an agent loop inside one node.

``research`` is an ``async def`` handler: each turn awaits the model, and the model may
ask for a tool (here: a tiny in-memory search index), whose answer goes back into the
conversation. ``ScriptedModel`` stands in for an async model client (with the official
SDKs the loop is the same: ``await client.chat.completions.create(...)``) so that the
example runs anywhere. What makes the loop durable is all in ``ctx``:

- ``ctx.messages`` is the conversation: appended to, saved with each checkpoint, and laid
  back over the run's history when the node runs again (``ctx.resumed_from``);
- ``ctx.scratch`` holds the loop's own notes (the sources read so far);
- ``ctx.progress(...)`` is a safe point: the node's ``checkpoint: {turns: 3, every: 30s}``
  saves the working context there, one commit each;
- a cancel (or the node's timeout) raises ``asyncio.CancelledError`` at the current
  await — the model call — and the handler keeps the draft it has.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn import Message, State, StepContext

INDEX = {
    "durable execution": "A durable workflow survives crashes by recording each step.",
    "checkpoint": "A checkpoint saves a long step's working context while it runs.",
    "exactly once": "An effects ledger records an intent before the call, the result after.",
}


class ScriptedModel:
    """An async stand-in for a model: it searches each topic once, then writes."""

    def __init__(self, latency_s: float = 0.01) -> None:
        self.latency_s = latency_s

    async def complete(self, messages: list[Message], topics: list[str]) -> Message:
        await asyncio.sleep(self.latency_s)  # where a real model call waits
        asked = {m["content"] for m in messages if m["role"] == "assistant"}
        for topic in topics:
            if f"search: {topic}" not in asked:
                return {"role": "assistant", "content": f"search: {topic}", "tool": topic}
        found = [m["content"] for m in messages if m["role"] == "tool"]
        return {"role": "assistant", "content": "Summary: " + " ".join(found)}


async def search(topic: str) -> str:
    await asyncio.sleep(0)  # a real tool awaits its HTTP call here
    return INDEX.get(topic, f"nothing found on {topic!r}")


model = ScriptedModel()


async def research(ctx: StepContext, state: State) -> State:
    topics = list(state.get("topics", INDEX))
    max_turns = int(state.get("max_turns", 20))
    if ctx.resumed_from is not None:
        ctx.log.info("resuming at checkpoint %d, turn %d", ctx.resumed_from, ctx.turns)
    messages, scratch = ctx.messages, ctx.scratch
    if not messages or messages[0].get("role") != "user":
        messages.insert(0, {"role": "user", "content": f"Research: {', '.join(topics)}"})
    try:
        for turn in range(max_turns):
            reply = await model.complete(messages, topics)
            messages.append({"role": "assistant", "content": reply["content"]})
            if "tool" not in reply:
                return {"summary": reply["content"], "sources": scratch.get("sources", [])}
            messages.append({"role": "tool", "content": await search(reply["tool"])})
            scratch.setdefault("sources", []).append(reply["tool"])
            ctx.progress(turn + 1, max_turns, f"read {reply['tool']}")  # a safe point
    except asyncio.CancelledError:
        # Stopped at the model call: keep the draft so far, readable in the run.
        notes = [m["content"] for m in messages if m["role"] == "tool"]
        return {"summary": "(cancelled) " + " ".join(notes), "complete": False}
    return {"summary": "(gave up: too many turns)", "complete": False}


def publish(ctx: StepContext, state: State) -> State:
    return {"published": f"{len(state.get('sources', []))} sources: {state['summary'][:60]}"}
