"""Context that fits: a node's context budget compacts older messages through its
``summarize`` handler before a call is sent, and the whole conversation stays in the
record. In this process, on SQLite, with the real OpenAI SDK against the stand-in (a
server on threads of this process). Which messages are kept, and the budget's
declaration: tests/unit/test_model_context.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from cairn.model.definition import ContextPolicy, Ref
from cairn.model.keys import ExecutionKey
from cairn.model.state import RunState
from cairn.observe.model_calls import model_calls_view
from cairn.recording.calls import ModelCallRefused
from cairn.store.sql import Store
from cairn.testing.model_server import ModelServer, Reply
from cairn.testing.store_rows import started
from cairn.workers.context import StepContext
from tests.support.contexts import model_calls, step_context
from tests.unit.test_model_context import (
    SYSTEM,
    TASK,
    summarize,  # noqa: F401 - named by {__name__}:summarize
)


async def summarize_async(ctx: StepContext, messages: list[dict[str, Any]]) -> str:
    async with AsyncOpenAI(base_url=ctx.state["model_url"], api_key="t") as client:
        reply = await ctx.model(client).chat.completions.create(
            model="summarizer", messages=[{"role": "user", "content": f"Summarize {messages}"}]
        )
    return str(reply.choices[0].message.content)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


def _ctx(
    store: Store, key: ExecutionKey, server: ModelServer, policy: ContextPolicy, *, live: bool
) -> StepContext:
    state = RunState(key.run_id, "w", 1)
    state.vars["model_url"] = server.openai_base_url
    calls = model_calls(store, key, live=live, may_have_record=not live, context=policy)
    return step_context(key, state, model_calls=calls)


def _agent(ctx: StepContext, server: ModelServer, turns: int) -> list[dict[str, Any]]:
    """An agent that keeps its whole conversation and sends all of it every turn."""
    model = ctx.model(OpenAI(base_url=server.openai_base_url, api_key="t"))
    messages: list[dict[str, Any]] = [SYSTEM, TASK]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"step {turn}: " + "details " * 20})
        reply = model.chat.completions.create(model="agent", messages=messages)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return messages


def test_older_messages_are_summarized_before_the_call_and_the_history_is_recorded(
    store: Store, server: ModelServer
) -> None:
    policy = ContextPolicy(400, Ref(f"{__name__}:summarize"), keep=2)
    _run_id, key, _at = started(store)
    conversation = _agent(_ctx(store, key, server, policy, live=True), server, 8)
    agent_calls = [r for r in server.requests if r.body["model"] == "agent"]
    summaries = [r for r in server.requests if r.body["model"] == "summarizer"]
    assert len(agent_calls) == 8
    assert 1 <= len(summaries) < len(agent_calls)  # a summary stands until it no longer fits
    for request in agent_calls:
        sent = request.body["messages"]
        assert sent[:2] == [SYSTEM, TASK]  # pinned: the system message and the task
        assert len(str(sent)) // 4 <= 400 or "[summary]" not in str(sent)
    last = agent_calls[-1].body["messages"]
    assert last[2]["content"].startswith("[summary]")
    # After the summary: what came since it, and the tail, verbatim and in order.
    assert last[3:] == conversation[len(conversation) - len(last) + 2 : -1]
    assert last[-2:] == conversation[-3:-1]

    with store.reading() as tx:
        calls = tx.model_calls_of(key)
        compacted = [c for c in calls if c.history is not None]
        final = calls[-1]
        assert final.history is not None
        history = tx.model_messages(final.history)
    assert compacted and all(c.model == "agent" for c in compacted)
    view = model_calls_view(store, key.run_id)
    assert [c["history"] for c in view["calls"]] == [c.history for c in calls]
    assert [view["messages"][d] for d in view["calls"][-1]["history"]] == conversation[:-1]
    # The whole conversation the handler passed stays readable, message by message.
    assert [history[d] for d in final.history] == conversation[:-1]
    assert len(final.messages) == len(last)

    requests = len(server.requests)
    replay = _ctx(store, key, server, policy, live=False)
    assert _agent(replay, server, 8) == conversation  # compacted the same way, from the record
    assert len(server.requests) == requests  # nothing sent: summaries and calls answered


def test_a_changed_history_is_refused_in_a_replay_at_the_summary(
    store: Store, server: ModelServer
) -> None:
    policy = ContextPolicy(300, Ref(f"{__name__}:summarize"), keep=2)
    _run_id, key, _at = started(store)
    _agent(_ctx(store, key, server, policy, live=True), server, 5)
    replay = _ctx(store, key, server, policy, live=False)
    model = replay.model(OpenAI(base_url=server.openai_base_url, api_key="t"))
    sent = len(server.requests)

    def other_conversation() -> None:
        for turn in range(5):
            messages = [SYSTEM, TASK, *[{"role": "user", "content": f"other {turn}" * 40}] * turn]
            model.chat.completions.create(model="agent", messages=messages)

    with pytest.raises(ModelCallRefused):
        other_conversation()
    assert len(server.requests) == sent


def test_an_async_client_awaits_an_async_summarize(store: Store, server: ModelServer) -> None:
    policy = ContextPolicy(200, Ref(f"{__name__}:summarize_async"), keep=1)
    _run_id, key, _at = started(store)
    ctx = _ctx(store, key, server, policy, live=True)
    server.script(Reply(text="the gist"), Reply(text="answered"))

    async def talk() -> Any:
        async with AsyncOpenAI(base_url=server.openai_base_url, api_key="t") as client:
            long = [SYSTEM, TASK, *({"role": "user", "content": "x " * 200} for _ in range(3))]
            return await ctx.model(client).chat.completions.create(model="agent", messages=long)

    assert asyncio.run(talk()).choices[0].message.content == "answered"
    first, second = server.requests
    assert first.body["model"] == "summarizer"
    summary = {"role": "user", "content": "Summary of the conversation so far:\nthe gist"}
    assert second.body["messages"][:3] == [SYSTEM, TASK, summary]
    assert len(second.body["messages"]) == 4
