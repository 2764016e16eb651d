"""Handlers that call a model through ``ctx.model`` with the official SDKs, against the
project's model stand-in (``MODEL_URL``): a tool-using agent loop, a few plain turns."""

from __future__ import annotations

import os
import time
from typing import Any

from cairn import PermanentError
from tests.integration.handlers import _record

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]


_clients: dict[str, Any] = {}  # one client per process, as the SDKs advise


def _client() -> Any:
    if "sync" not in _clients:
        # Imported when a handler first calls: every process of a test registers these
        # handlers, and the SDK takes a second to import.
        from openai import OpenAI  # noqa: PLC0415

        _clients["sync"] = OpenAI(base_url=os.environ["MODEL_URL"] + "/v1", api_key="test")
    return _clients["sync"]


def _system() -> str:
    # A replay run with another prompt (AGENT_PROMPT) asks the model something else.
    return os.environ.get("AGENT_PROMPT", "You are a careful research agent.")


def tool_agent(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Call the model until it stops asking for the ``lookup`` tool (at most 10 turns)."""
    _record(ctx, state, "start")
    model = ctx.model(_client())
    if not ctx.messages:
        ctx.messages.extend(
            [
                {"role": "system", "content": _system()},
                {"role": "user", "content": state.get("question", "What is a cairn?")},
            ]
        )
    for _turn in range(10):
        reply = model.chat.completions.create(
            model="gpt-stand-in", messages=ctx.messages, tools=TOOLS
        )
        message = reply.choices[0].message
        ctx.messages.append(message.model_dump(mode="json", exclude_none=True))
        _record(ctx, state, f"turn{ctx.turns}")
        if not message.tool_calls:
            return {"answer": message.content, "turns": ctx.turns}
        for call in message.tool_calls:
            ctx.messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": f"found {call.id}"}
            )
    return {"answer": None, "turns": ctx.turns}


async def async_turns(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``turns`` plain turns through the async client."""
    # The async client is bound to the loop it first runs on: the worker process's one.
    if "async" not in _clients:
        from openai import AsyncOpenAI  # noqa: PLC0415

        _clients["async"] = AsyncOpenAI(base_url=os.environ["MODEL_URL"] + "/v1", api_key="t")
    model = ctx.model(_clients["async"])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "count with me"}]
    said = []
    for _turn in range(int(state.get("turns", 3))):
        reply = await model.chat.completions.create(model="gpt-stand-in", messages=messages)
        text = reply.choices[0].message.content
        said.append(text)
        messages.append({"role": "assistant", "content": text})
    return {"said": said}


def streaming_turns(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``turns`` turns, each a streamed call whose words are read as they arrive."""
    model = ctx.model(_client())
    messages: list[dict[str, Any]] = [{"role": "user", "content": "tell me, slowly"}]
    for _turn in range(int(state.get("turns", 3))):
        words = []
        with model.chat.completions.create(
            model="gpt-stand-in",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
        ) as stream:
            for chunk in stream:
                if chunk.choices:
                    words.append(chunk.choices[0].delta.content or "")
        messages.append({"role": "assistant", "content": "".join(words)})
    return {"said": [m["content"] for m in messages if m["role"] == "assistant"]}


def unanswered(state: dict[str, Any]) -> bool:
    """A bisect predicate: good while the run has no answer yet."""
    return "answer" not in state.get("vars", state)


def one_call(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One model call (for concurrency limits: the stand-in counts them at once)."""
    _record(ctx, state, "start")
    reply = ctx.model(_client()).chat.completions.create(
        model="gpt-stand-in", messages=[{"role": "user", "content": f"run {ctx.run_id}"}]
    )
    return {"said": reply.choices[0].message.content}


def _async_client() -> Any:
    # The async client is bound to the loop it first runs on: the worker process's one.
    if "async" not in _clients:
        from openai import AsyncOpenAI  # noqa: PLC0415

        _clients["async"] = AsyncOpenAI(base_url=os.environ["MODEL_URL"] + "/v1", api_key="t")
    return _clients["async"]


async def checkpointing_agent(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A tool-using agent through the async client, checkpointed after each turn
    (``await ctx.checkpoint_async()``); told to ``fail``, it gives up before its first."""
    if state.get("fail"):
        raise PermanentError("told to fail")
    model = ctx.model(_async_client())
    if not ctx.messages:
        ctx.messages.append({"role": "user", "content": state.get("question", "What is a cairn?")})
    for _turn in range(10):
        reply = await model.chat.completions.create(
            model="gpt-stand-in", messages=ctx.messages, tools=TOOLS
        )
        message = reply.choices[0].message
        ctx.messages.append(message.model_dump(mode="json", exclude_none=True))
        for call in message.tool_calls or ():
            ctx.messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": f"found {call.id}"}
            )
        saved = await ctx.checkpoint_async()
        if not message.tool_calls:
            return {"answer": message.content, "turns": ctx.turns, "checkpoints": saved}
    return {"answer": None, "turns": ctx.turns}


def checkpointed_wrap(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A sync node that checkpoints (``ctx.checkpoint()``) before it answers."""
    ctx.scratch["answer"] = state["answer"]
    saved = ctx.checkpoint()
    return {"wrapped": f"{state['answer']} ({state['turns']} turns)", "wrap_checkpoints": saved}


def _cold_client() -> Any:
    """A client whose process's first request leaves half a second after it is sent —
    as a cold client's does while it builds its machinery (on a loaded machine)."""
    if "cold" not in _clients:
        import httpx2  # noqa: PLC0415
        from openai import OpenAI  # noqa: PLC0415

        first = [True]

        def slow_first(_request: Any) -> None:
            if first[0]:
                first[0] = False
                time.sleep(0.5)

        _clients["cold"] = OpenAI(
            base_url=os.environ["MODEL_URL"] + "/v1",
            api_key="test",
            http_client=httpx2.Client(event_hooks={"request": [slow_first]}),
        )
    return _clients["cold"]


def one_cold_call(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One model call through :func:`_cold_client`."""
    reply = ctx.model(_cold_client()).chat.completions.create(
        model="gpt-stand-in", messages=[{"role": "user", "content": f"run {ctx.run_id}"}]
    )
    return {"said": reply.choices[0].message.content}


def prepare_question(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A pure query (an ephemeral node): the question to ask."""
    return {"question": f"What is run {ctx.run_id}?"}


def fused_think(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A model call, a checkpoint, and a tool looked up over plain HTTP (its node records
    it): what a durable node run on after an ephemeral one must be able to do."""
    import httpx  # noqa: PLC0415

    reply = ctx.model(_client()).chat.completions.create(
        model="gpt-stand-in", messages=[{"role": "user", "content": state["question"]}]
    )
    saved = ctx.checkpoint()
    with httpx.Client() as client:
        looked = client.get(os.environ["TOOLS_URL"] + "/lookup").json()
    return {"answer": reply.choices[0].message.content, "checkpoint": saved, "looked": looked}


async def awaits_model(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Two calls through the async client, each naming its run for the stand-in to count
    by: ``first``, then ``held`` — the one a test has the stand-in hold open."""
    model = ctx.model(_async_client())
    said = []
    for call in ("first", "held"):
        reply = await model.chat.completions.create(
            model="gpt-stand-in", messages=[{"role": "user", "content": f"{call} {ctx.run_id}"}]
        )
        said.append(reply.choices[0].message.content)
    return {"said": said}
