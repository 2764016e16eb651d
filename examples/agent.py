"""Handlers for ``examples/agent_loop.yaml``: an agent on the official ``openai`` SDK.

``think`` asks the model, through ``ctx.model(OpenAI())``, with the conversation so far
and the ``calculate`` tool; ``act`` runs the tool calls it asked for and answers them in
the conversation; the loop goes back to ``think`` until the model answers. The answer
waits for a person's approval, and ``deliver`` then puts it in the outbox once, through
``ctx.effect``.

The conversation is the run's ``messages`` (``ctx.messages``), in OpenAI's chat format,
saved with each step. ``OpenAI()`` reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` from
the worker's environment: point them at a provider, or at the model stand-in playing
``examples/calculator_model.py``. ``AGENT_MODEL`` names the model (``gpt-4.1-mini``).

The outbox is a directory, ``AGENT_OUTBOX`` (``outbox`` in the worker's working
directory by default): the external system the answer is delivered to. It holds each
delivery once by its idempotency key, and ``Outbox`` tells the effects ledger (and
``cairn reconcile``, given ``CAIRN_EFFECT_ADAPTERS=agent.deliver=examples.agent:Outbox``)
whether a delivery is there.
"""

from __future__ import annotations

import json
import operator
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from cairn.effects import Check, Effect, Verdict, effect_adapter

if TYPE_CHECKING:
    from openai import OpenAI
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

    from cairn import Message, State, StepContext

SYSTEM = (
    "You answer arithmetic questions. Work them out left to right with the calculate "
    "tool, one operation at a time, then answer 'The answer is N.' Refuse anything else."
)

CALCULATE: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Apply one arithmetic operation: left op right.",
        "parameters": {
            "type": "object",
            "properties": {
                "left": {"type": "integer"},
                "op": {"type": "string", "enum": ["+", "-", "*"]},
                "right": {"type": "integer"},
            },
            "required": ["left", "op", "right"],
            "additionalProperties": False,
        },
    },
}

OPERATORS: dict[str, Callable[[int, int], int]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}

DELIVERY = "agent.deliver"

# The shape of an answer, as the system prompt asks for it; anything else is a refusal.
_ANSWER = re.compile(r"The answer is (-?\d+)\.")

_clients: dict[str, OpenAI] = {}  # one client per process, as the SDK advises


def _client() -> OpenAI:
    if "openai" not in _clients:
        # Imported here: the SDK is an extra (cairn[openai]), and validating or
        # describing the workflow must not need it.
        from openai import OpenAI  # noqa: PLC0415

        _clients["openai"] = OpenAI()
    return _clients["openai"]


def think(ctx: StepContext, state: State) -> State:
    """One model turn: route to ``calculate`` (it asked for tools), ``answer`` or
    ``give_up`` (it refused)."""
    if not ctx.messages:
        ctx.messages.extend(
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": str(state["question"])},
            ]
        )
    completion = ctx.model(_client()).chat.completions.create(
        model=os.environ.get("AGENT_MODEL", "gpt-4.1-mini"),
        # ctx.messages holds the conversation in OpenAI's chat format (think wrote it).
        messages=cast("list[ChatCompletionMessageParam]", ctx.messages),
        tools=[CALCULATE],
    )
    message = completion.choices[0].message
    said: Message = {"role": "assistant", "content": message.content}
    # Only function tools were offered: a custom tool call would be a model's mistake.
    calls = [call for call in message.tool_calls or [] if call.type == "function"]
    if calls:
        said["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in calls
        ]
    ctx.messages.append(said)
    if calls:
        return {"action": "calculate"}
    found = _ANSWER.search(message.content or "")
    if found is None:
        return {"action": "give_up", "refusal": message.content}
    return {"action": "answer", "answer": found.group(0), "value": int(found.group(1))}


def act(ctx: StepContext, state: State) -> State:
    """Run the tool calls of the model's last turn; each answer goes back to it as a
    ``tool`` message, an error included (the model decides what to make of it)."""
    calls = ctx.messages[-1].get("tool_calls") or []
    for call in calls:
        ctx.messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": _run_tool(call["function"])}
        )
    return {"tool_calls": int(state.get("tool_calls", 0)) + len(calls)}


def _run_tool(function: Message) -> str:
    if function.get("name") != "calculate":
        return f"error: there is no tool {function.get('name')!r}"
    try:
        arguments = json.loads(function.get("arguments") or "{}")
        left, op, right = int(arguments["left"]), str(arguments["op"]), int(arguments["right"])
    except (ValueError, TypeError, KeyError) as exc:
        return f"error: calculate takes integers left, right and an op: {exc}"
    if op not in OPERATORS:
        return f"error: calculate knows {', '.join(OPERATORS)}, not {op!r}"
    return str(OPERATORS[op](left, right))


def deliver(ctx: StepContext, state: State) -> State:
    """Put the approved answer in the outbox, once: the run's key is the same on every
    retry and recovery, so the ledger (and the outbox itself) hold one delivery."""
    message = {"run": ctx.run_id, "question": state["question"], "answer": state["answer"]}
    receipt = ctx.effect(
        DELIVERY, f"{ctx.run_id}:answer", lambda key: _write_once(outbox(), key, message)
    )
    return {"delivered": receipt["path"]}


def outbox() -> Path:
    # From the environment, not the run's state: the adapter and `cairn reconcile`, which
    # see no state, must look in the same place.
    return Path(os.environ.get("AGENT_OUTBOX", "outbox"))


def delivery_path(directory: Path, key: str) -> Path:
    """Where the delivery with this key lives (a live fork's keys carry ``@fork:…``)."""
    return directory / (re.sub(r"[^A-Za-z0-9._:@-]", "_", key) + ".json")


def _write_once(directory: Path, key: str, message: Message) -> Message:
    """Deliver ``message`` under ``key`` unless a delivery with that key is there: the
    receiving side's idempotency, as an ``Idempotency-Key`` header gets from an API."""
    directory.mkdir(parents=True, exist_ok=True)
    path = delivery_path(directory, key)
    draft = directory / f".{path.name}.{os.getpid()}.tmp"
    draft.write_text(json.dumps({"key": key, "at": time.time(), **message}, indent=2) + "\n")
    try:
        # A hard link appears whole or not at all, and only if nothing has the name yet.
        os.link(draft, path)
    except FileExistsError:
        pass  # delivered before, by an execution whose outcome was not recorded
    finally:
        draft.unlink()
    return {"path": str(path), **json.loads(path.read_text())}


@effect_adapter(DELIVERY)
class Outbox:
    """Whether a delivery is in the outbox: asked before a delivery whose outcome the
    ledger lacks is made again, and by ``cairn reconcile``."""

    def check(self, effect: Effect) -> Check:
        path = delivery_path(outbox(), effect.key)
        if not path.exists():
            return Check(Verdict.ABSENT)
        return Check(Verdict.APPLIED, record={"path": str(path), **json.loads(path.read_text())})
