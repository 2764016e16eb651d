"""ctx.model in this process, on SQLite, with the real SDKs against the model stand-in:
each call recorded once as it completes, answered from the record when the node runs
again, refused in a replay when it asks something else, and stored by reference — each
message once. (On real services with a worker killed mid-call: tests/acceptance.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic import Anthropic
from openai import AsyncOpenAI, OpenAI

from cairn.config import Settings
from cairn.model.failures import BudgetExceeded, PermanentError, TransientError
from cairn.model.keys import ExecutionKey
from cairn.model.state import RunState
from cairn.store.model_calls import messages_stored
from cairn.store.sql import Store
from cairn.testing.model_server import Fault, ModelServer, Reply, ToolCall
from cairn.testing.store_contract import started
from cairn.workers.context import StepContext
from cairn.workers.models import ModelCallRefused, ModelCalls, price_of


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture
def openai_client(server: ModelServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.openai_base_url, api_key="test") as client:  # 2 retries
        yield client


@pytest.fixture
def claude(server: ModelServer) -> Iterator[Anthropic]:
    with Anthropic(base_url=server.anthropic_base_url, api_key="test") as client:
        yield client


def _ctx(
    store: Store,
    key: ExecutionKey,
    *,
    again: bool = False,
    live: bool = True,
    allowance: dict[str, float] | None = None,
    prices: dict[str, tuple[float, float]] | None = None,
) -> StepContext:
    calls = ModelCalls(
        store,
        key,
        1,
        1,
        max_bytes=1_000_000,
        reconnect_within=0.0,
        live=live,
        may_have_record=again or not live,
        prices=prices or {},
    )
    return StepContext(
        run_id=key.run_id,
        workflow="w",
        node=key.node,
        iteration=key.iteration,
        attempt=1,
        phase=key.phase,
        state=RunState(key.run_id, "w", 1),
        model_calls=calls,
        allowance=allowance,
    )


def _conversation(ctx: StepContext, client: Any, turns: int) -> list[str]:
    model = ctx.model(client)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    said = []
    for _ in range(turns):
        reply = model.chat.completions.create(model="m", messages=messages)
        said.append(reply.choices[0].message.content)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return said


def test_calls_are_recorded_once_and_answered_from_the_record_when_the_node_runs_again(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    client = openai_client
    first = _conversation(_ctx(store, key), client, 3)
    assert first == ["reply 0", "reply 1", "reply 2"] and server.count() == 3
    again = _ctx(store, key, again=True)
    assert _conversation(again, client, 4) == [*first, "reply 3"]
    assert server.count() == 4  # only the call the record did not hold was sent
    assert again.charges["tokens"] > 0  # answered calls are charged as made


def test_a_replay_answers_from_the_record_and_refuses_what_differs(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    client = openai_client
    _conversation(_ctx(store, key), client, 2)
    assert _conversation(_ctx(store, key, live=False), client, 2) == ["reply 0", "reply 1"]
    replay = _ctx(store, key, live=False).model(client)
    with pytest.raises(ModelCallRefused, match=r"call 0 diverged.*messages differ"):
        replay.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ModelCallRefused, match=r"parameters differ \(temperature\)"):
        _ctx(store, key, live=False).model(client).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}], temperature=0.2
        )
    assert server.count() == 2


def test_anthropic_and_async_clients_are_recorded_the_same_way(
    store: Store, server: ModelServer, claude: Anthropic
) -> None:
    _run_id, key, _at = started(store)
    server.script(Reply(tool_calls=(ToolCall("lookup", {"word": "cairn"}),)), Reply(text="a"))
    anthropic = _ctx(store, key).model(claude)
    message = anthropic.messages.create(
        model="claude-m", max_tokens=64, messages=[{"role": "user", "content": "look it up"}]
    )
    assert message.content[0].type == "tool_use" and message.content[0].input == {"word": "cairn"}

    async def talk() -> str:
        async with AsyncOpenAI(base_url=server.openai_base_url, api_key="t") as client:
            model = _ctx(store, other).model(client)
            reply = await model.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
            return str(reply.choices[0].message.content)

    _other_run, other, _at = started(store)  # an execution of another run
    assert asyncio.run(talk()) == "a"
    again = _ctx(store, key, again=True).model(claude)
    assert again.messages.create(
        model="claude-m", max_tokens=64, messages=[{"role": "user", "content": "look it up"}]
    ).content[0].input == {"word": "cairn"}
    assert server.count() == 2


def test_provider_errors_become_cairns_and_the_sdk_does_not_retry(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    client = openai_client
    server.script(Fault(status=429, retry_after_s=2), Fault(context_length=True))
    model = _ctx(store, key).model(client)
    with pytest.raises(TransientError) as busy:
        model.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert busy.value.retry_after_s == 2.0 and server.count() == 1
    with pytest.raises(PermanentError, match="context"):
        model.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])


def test_a_call_the_budget_cannot_cover_is_not_sent(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    ctx = _ctx(store, key, allowance={"tokens": 50})
    model = ctx.model(openai_client)
    with pytest.raises(BudgetExceeded, match="not sent"):
        model.chat.completions.create(model="m", messages=[{"role": "user", "content": "y" * 400}])
    assert server.count() == 0


def test_a_conversation_stores_each_message_once(store: Store, openai_client: OpenAI) -> None:
    """Each call sends the whole history so far; the record keeps each message once."""
    _run_id, key, _at = started(store)
    _conversation(_ctx(store, key), openai_client, 20)
    with store.reading() as tx:
        calls = tx.model_calls_of(key)
        sent = sum(len(call.messages) for call in calls)  # what an O(n^2) record would hold
        stored = tx.model_messages([d for call in calls for d in call.messages])
    # Call i sends the question and the i replies before it: 210 messages sent in all,
    # 20 distinct (the question and 19 replies) stored.
    assert len(calls) == 20 and sent == sum(range(1, 21)) == 210 and len(stored) == 20


def test_a_calls_messages_are_kept_as_what_it_added_to_an_earlier_calls() -> None:
    assert messages_stored(["a", "b", "c"], {0: ["a"], 1: ["a", "b"]}) == {
        "after": 1,
        "added": ["c"],
    }
    assert messages_stored(["x", "y"], {0: ["a"]}) == ["x", "y"]  # no earlier prefix
    assert messages_stored(["a"], {}) == ["a"]


# -- streaming calls ---------------------------------------------------------------------


def _streamed_text(model: Any, **kwargs: Any) -> str:
    with model.chat.completions.create(model="m", stream=True, **kwargs) as stream:
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_a_streamed_call_is_recorded_as_its_message_and_streamed_again_from_the_record(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    server.script(Reply(text="the whole answer, in words"))
    asked = {"messages": [{"role": "user", "content": "stream it"}]}
    usage = {"stream_options": {"include_usage": True}}
    first = _ctx(store, key)
    assert (
        _streamed_text(first.model(openai_client), **asked, **usage) == "the whole answer, in words"
    )
    assert first.charges["tokens"] > 0 and server.count() == 1
    with store.reading() as tx:
        (call,) = tx.model_calls_of(key)
    assert call.response["choices"][0]["message"]["content"] == "the whole answer, in words"
    again = _ctx(store, key, again=True)
    assert (
        _streamed_text(again.model(openai_client), **asked, **usage) == "the whole answer, in words"
    )
    assert again.charges == first.charges and server.count() == 1  # not sent again


def test_a_stream_that_breaks_off_records_nothing_and_is_sent_again(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    server.script(Fault(drop_after_chunks=2), Reply(text="complete this time"))
    asked = {"messages": [{"role": "user", "content": "stream it"}]}
    with pytest.raises(TransientError):
        _streamed_text(_ctx(store, key).model(openai_client), **asked)
    with store.reading() as tx:
        assert tx.model_calls_of(key) == []
    assert _streamed_text(_ctx(store, key, again=True).model(openai_client), **asked) == (
        "complete this time"
    )
    assert server.count() == 2


def test_anthropic_and_async_streams_are_recorded_and_replayed(
    store: Store, server: ModelServer, claude: Anthropic
) -> None:
    _run_id, key, _at = started(store)
    server.script(
        Reply(text="hello there", tool_calls=(ToolCall("lookup", {"word": "x"}),)),
        Reply(text="async words"),
    )
    asked: dict[str, Any] = {
        "model": "claude-m",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
    }

    def events(model: Any) -> tuple[str, list[Any]]:
        text, tools = "", []
        for event in model.messages.create(**asked):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text += event.delta.text
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                tools.append(event.content_block.name)
        return text, tools

    assert events(_ctx(store, key).model(claude)) == ("hello there", ["lookup"])
    assert events(_ctx(store, key, live=False).model(claude)) == ("hello there", ["lookup"])
    _other_run, other, _at = started(store)

    async def talk(ctx: StepContext) -> str:
        async with AsyncOpenAI(base_url=server.openai_base_url, api_key="t") as client:
            stream = await ctx.model(client).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "a"}], stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert asyncio.run(talk(_ctx(store, other))) == "async words"
    assert asyncio.run(talk(_ctx(store, other, live=False))) == "async words"
    assert server.count() == 2


# -- cost -------------------------------------------------------------------------------


def test_usage_is_priced_by_the_price_table_and_a_call_past_the_usd_left_is_not_sent(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    prices = Settings(model_prices="gpt-4.1=2/8,gpt-4.1-mini=0.4/1.6").model_prices
    assert prices == {"gpt-4.1": (2.0, 8.0), "gpt-4.1-mini": (0.4, 1.6)}
    assert price_of(prices, "gpt-4.1-mini-2025-04-14") == (0.4, 1.6)  # the longest start
    assert price_of(prices, "claude") is None
    _run_id, key, _at = started(store)
    ctx = _ctx(store, key, allowance={"usd": 0.01}, prices=prices)
    server.script(Reply(text="ok", input_tokens=1000, output_tokens=500))
    model = ctx.model(openai_client)
    model.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "a"}])
    assert ctx.charges["usd"] == pytest.approx((1000 * 2 + 500 * 8) / 1e6)
    with pytest.raises(BudgetExceeded, match="usd"):  # 20,000 tokens at $2/M: $0.04 > $0.004
        model.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "z" * 80_000}]
        )
    assert server.count() == 1
    with pytest.raises(ValueError, match="MODEL=INPUT/OUTPUT"):
        Settings(model_prices="gpt-4.1=two/8")


def test_the_responses_api_is_recorded_and_answered_from_the_record(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    server.script(Reply(text="a response", input_tokens=12, output_tokens=3))
    first = _ctx(store, key)
    answer = first.model(openai_client).responses.create(model="m", input="say something")
    assert answer.output_text == "a response" and first.charges["tokens"] == 15
    again = _ctx(store, key, live=False).model(openai_client)
    assert again.responses.create(model="m", input="say something").output_text == "a response"
    with pytest.raises(ModelCallRefused, match="messages differ"):
        _ctx(store, key, live=False).model(openai_client).responses.create(
            model="m", input="say something else"
        )
    with pytest.raises(NotImplementedError, match="stream"):
        first.model(openai_client).responses.create(model="m", input="x", stream=True)
    assert server.count() == 1
