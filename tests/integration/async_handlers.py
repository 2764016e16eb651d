"""``async def`` handlers for the async workflows: they await real sockets and the effects'
test service, and write the same ledger as the synchronous ones (``_record``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx

from tests.integration.handlers import _record


async def think(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A few model turns: an await each, a message appended each."""
    _record(ctx, state, "start")
    for turn in range(int(state.get("turns", 3))):
        ctx.raise_if_cancelled()
        await asyncio.sleep(float(state.get("turn_s", 0.01)))
        ctx.messages.append({"role": "assistant", "content": f"turn {turn}"})
    _record(ctx, state, "done")
    return {"thought": len(ctx.messages)}


async def charge(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A charge through the effects' test service, awaited: applied once however often
    the node runs."""
    order = state["order"]

    async def call(key: str) -> Any:
        async with httpx.AsyncClient(base_url=os.environ["EFFECT_SERVICE_URL"]) as client:
            response = await client.post(
                "/charges",
                json={"order": order, "amount": state.get("amount", 100)},
                headers=ctx.idempotency_headers(key),
                timeout=10,
            )
            response.raise_for_status()
            return response.json()

    result = await ctx.effect_async("payments.charge", f"{order}:charge", call)
    _record(ctx, state, "charged")
    return {"charge_id": result["id"]}


async def undo(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """An async compensation."""
    await asyncio.sleep(0)
    _record(ctx, state, "undo")
    return {f"undone_{ctx.node}": True}


async def hang_once(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """On its first attempt, awaits an HTTP server that accepts and never answers, with
    no client timeout (a model call that hangs); later attempts return at once."""
    _record(ctx, state, "start")
    if ctx.attempt == 1:
        try:
            async with httpx.AsyncClient(timeout=None) as client:
                await client.get(state["silent_url"])
        except asyncio.CancelledError:
            _record(ctx, state, "cancelled")  # stopped at its await: cleanup runs
            raise
    _record(ctx, state, "done")
    return {"answered_on_attempt": ctx.attempt}


async def listen(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Reads a stream that never ends (the silent server) until it is cancelled; keeps
    what it has, as a handler keeps a model's partial output."""
    _record(ctx, state, "start")
    try:
        async with httpx.AsyncClient(timeout=None) as client:
            await client.get(state["silent_url"])
    except asyncio.CancelledError:
        _record(ctx, state, "cancelled")
        return {"partial": "what the stream had said"}
    return {}


async def agent_loop(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """An agent loop of ``turns`` model turns against the model stand-in, a checkpoint
    after each (``checkpoint_each``), else only the node's automatic ones; a resumed
    execution notes where it resumed and with how many messages."""
    if ctx.resumed_from is not None:
        _record(ctx, state, f"resumed@{ctx.resumed_from}:{ctx.turns}:{len(ctx.messages)}")
    else:
        _record(ctx, state, "start")
    turns = int(state.get("turns", 40))
    async with httpx.AsyncClient(base_url=state["model_url"], timeout=None) as client:
        while (turn := ctx.turns) < turns:
            response = await client.post("/turn", json={"run": ctx.run_id, "turn": turn})
            ctx.messages.append({"role": "assistant", "content": response.json()["reply"]})
            ctx.scratch["last_turn"] = turn
            if state.get("checkpoint_each", True):
                await ctx.checkpoint_async()
            ctx.progress(ctx.turns, turns, "thinking")  # a safe point: automatic checkpoints
    _record(ctx, state, "done")
    return {"turns_taken": ctx.turns, "last_turn": ctx.scratch["last_turn"]}


async def ponder(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A fan-out's async branch: one await of ``state["ponder_s"]`` (a model call's
    time), its own output key so that branches merge."""
    _record(ctx, state, "start")
    await asyncio.sleep(float(state.get("ponder_s", 0.01)))
    return {ctx.node: ctx.iteration}
