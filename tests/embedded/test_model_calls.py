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
from cairn.recording.calls import ModelCallRefused
from cairn.recording.sdk import price_of
from cairn.store.model_calls import messages_stored
from cairn.store.sql import Store
from cairn.testing.model_server import Fault, ModelServer, Reply, ToolCall
from cairn.testing.store_rows import started
from cairn.workers.context import StepContext
from tests.support.contexts import model_calls, step_context


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
    calls = model_calls(
        store, key, live=live, may_have_record=again or not live, prices=prices or {}
    )
    return step_context(key, model_calls=calls, allowance=allowance)


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
    assert server.count() == 1


# -- the SDKs' stream helpers, streamed Responses, any other client -----------------------


def test_streamed_responses_are_recorded_and_streamed_again_through_both_forms(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    """``responses.create(stream=True)`` and the SDK's ``responses.stream`` helper, with
    a tool call: recorded as the response the stream ended with, and answered from the
    record by events the helper assembles into the same response."""
    _run_id, key, _at = started(store)
    server.script(
        Reply(text="the streamed response", tool_calls=(ToolCall("look", {"q": "x"}),)),
        Reply(text="from the helper"),
    )

    def deltas(model: Any) -> str:
        stream = model.responses.create(model="m", input="go", stream=True)
        return "".join(e.delta for e in stream if e.type == "response.output_text.delta")

    def helper(model: Any) -> tuple[str, list[str]]:
        with model.responses.stream(model="m", input="go on") as stream:
            for _event in stream:
                pass
            final = stream.get_final_response()
        return final.output_text, [item.type for item in final.output]

    first = _ctx(store, key)
    assert deltas(first.model(openai_client)) == "the streamed response"
    assert helper(first.model(openai_client)) == ("from the helper", ["message"])
    with store.reading() as tx:
        recorded = tx.model_calls_of(key)
    assert [call.response["output"][0]["type"] for call in recorded] == ["message", "message"]
    assert recorded[0].response["output"][1]["name"] == "look"
    assert first.charges["tokens"] == sum(
        call.response["usage"]["total_tokens"] for call in recorded
    )
    replay = _ctx(store, key, live=False)
    assert deltas(replay.model(openai_client)) == "the streamed response"
    assert helper(replay.model(openai_client)) == ("from the helper", ["message"])
    assert replay.charges == first.charges and server.count() == 2


def test_the_chat_stream_helper_is_recorded_and_replayed_sync_and_async(
    store: Store, server: ModelServer, openai_client: OpenAI
) -> None:
    _run_id, key, _at = started(store)
    server.script(
        Reply(text="helper words", tool_calls=(ToolCall("add", {"a": 1, "b": 2}),)),
        Reply(text="async helper words"),
    )
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    asked: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "a"}]}

    def helper(model: Any) -> tuple[str, str]:
        text = ""
        with model.chat.completions.stream(**asked, tools=tools) as stream:
            for event in stream:
                if event.type == "content.delta":
                    text += event.delta
            final = stream.get_final_completion()
        return text, final.choices[0].message.tool_calls[0].function.arguments

    assert helper(_ctx(store, key).model(openai_client)) == ("helper words", '{"a": 1, "b": 2}')
    assert helper(_ctx(store, key, live=False).model(openai_client)) == (
        "helper words",
        '{"a": 1, "b": 2}',
    )
    _other_run, other, _at = started(store)

    async def talk(ctx: StepContext) -> str:
        async with AsyncOpenAI(base_url=server.openai_base_url, api_key="t") as client:
            async with ctx.model(client).chat.completions.stream(**asked) as stream:
                final = await stream.get_final_completion()
            return str(final.choices[0].message.content)

    assert asyncio.run(talk(_ctx(store, other))) == "async helper words"
    assert asyncio.run(talk(_ctx(store, other, live=False))) == "async helper words"
    assert server.count() == 2


def test_the_anthropic_stream_helper_is_recorded_and_replayed_sync_and_async(
    store: Store, server: ModelServer, claude: Anthropic
) -> None:
    _run_id, key, _at = started(store)
    server.script(Reply(text="claude streams"), Reply(text="claude streams async"))
    asked: dict[str, Any] = {
        "model": "claude-m",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "go"}],
    }

    def helper(model: Any) -> tuple[str, str]:
        with model.messages.stream(**asked) as stream:
            text = "".join(stream.text_stream)
            return text, stream.get_final_message().stop_reason

    first = _ctx(store, key)
    assert helper(first.model(claude)) == ("claude streams", "end_turn")
    assert helper(_ctx(store, key, live=False).model(claude)) == ("claude streams", "end_turn")
    assert first.charges["tokens"] > 0
    with pytest.raises(TypeError, match="output_config"):
        first.model(claude).messages.stream(**asked, output_format=dict)
    _other_run, other, _at = started(store)

    async def talk(ctx: StepContext) -> str:
        from anthropic import AsyncAnthropic  # noqa: PLC0415

        async with (
            AsyncAnthropic(base_url=server.anthropic_base_url, api_key="t") as client,
            ctx.model(client).messages.stream(**asked) as stream,
        ):
            return "".join([text async for text in stream.text_stream])

    assert asyncio.run(talk(_ctx(store, other))) == "claude streams async"
    assert asyncio.run(talk(_ctx(store, other, live=False))) == "claude streams async"
    assert server.count() == 2


class _Completion:
    """What some other client answers with: not JSON data, not a pydantic model."""

    def __init__(self, text: str, tokens: tuple[int, int]) -> None:
        self.text, self.tokens = text, tokens


def test_any_other_client_is_recorded_through_a_function_and_its_usage(store: Store) -> None:
    sent: list[dict[str, Any]] = []

    def complete(*, model: str, messages: list[dict[str, Any]]) -> _Completion:
        sent.append({"model": model, "messages": messages})
        return _Completion(f"answer {len(sent)}", (7, 2))

    def recorded(ctx: StepContext) -> Any:
        return ctx.model(
            complete,
            provider="acme",
            usage=lambda reply: {"input_tokens": reply.tokens[0], "output_tokens": reply.tokens[1]},
            encode=lambda reply: {"text": reply.text, "tokens": list(reply.tokens)},
            decode=lambda data: _Completion(data["text"], tuple(data["tokens"])),
        )

    _run_id, key, _at = started(store)
    first = _ctx(store, key)
    asked = {"model": "acme-1", "messages": [{"role": "user", "content": "hi"}]}
    assert recorded(first)(**asked).text == "answer 1"
    assert first.charges == {"tokens": 9.0, "input_tokens": 7.0, "output_tokens": 2.0}
    replay = _ctx(store, key, live=False)
    answered = recorded(replay)(**asked)
    assert isinstance(answered, _Completion) and answered.text == "answer 1"
    assert replay.charges == first.charges and len(sent) == 1
    with pytest.raises(ModelCallRefused, match="messages differ"):
        recorded(_ctx(store, key, live=False))(model="acme-1", messages=[])
    with store.reading() as tx:
        (call,) = tx.model_calls_of(key)
    assert (call.provider, call.operation, call.model) == ("acme", complete.__qualname__, "acme-1")

    _other_run, other, _at = started(store)

    async def acomplete(*, prompt: str) -> dict[str, Any]:
        sent.append({"prompt": prompt})
        return {"text": prompt.upper()}

    assert asyncio.run(_ctx(store, other).model(acomplete, provider="acme")(prompt="x")) == {
        "text": "X"
    }
    replayed = _ctx(store, other, live=False).model(acomplete, provider="acme")
    assert asyncio.run(replayed(prompt="x")) == {"text": "X"} and len(sent) == 2
    with pytest.raises(TypeError, match="encode="):
        _ctx(store, other).model(lambda **_: object(), provider="acme")(prompt="y")
    with pytest.raises(TypeError, match="go with provider="):
        _ctx(store, other).model(complete, usage=len)


def test_a_large_message_and_response_go_to_the_artifact_store(
    store: Store, server: ModelServer, openai_client: OpenAI, tmp_path: Any
) -> None:
    """Past ``inline_bytes``, a message's and a response's content are artifacts of the
    run; the record holds their references, and a call answered from the record reads
    the response back."""
    from cairn.artifacts import ArtifactRegistry, Artifacts  # noqa: PLC0415
    from cairn.artifacts.stores import FilesystemStore  # noqa: PLC0415
    from cairn.recording.calls import OFFLOADED  # noqa: PLC0415

    run_id, key, _at = started(store)
    objects = FilesystemStore(tmp_path / "blobs")

    def ctx(*, live: bool) -> StepContext:
        calls = model_calls(store, key, live=live, may_have_record=not live, inline_bytes=2_000)
        artifacts = Artifacts(
            ArtifactRegistry(store), objects, run_id=run_id, node=key.node, iteration=1, attempt=1
        )
        return step_context(key, model_calls=calls, artifacts=artifacts)

    document = {"role": "user", "content": "a long document " * 400}
    server.script(Reply(text="summary " * 500))
    asked = {"model": "m", "messages": [document]}
    answer = ctx(live=True).model(openai_client).chat.completions.create(**asked)
    with store.reading() as tx:
        (call,) = tx.model_calls_of(key)
        (stored,) = tx.model_messages(call.messages).values()
    assert set(call.response) == {OFFLOADED, "name", "bytes"} and call.response["bytes"] > 2_000
    assert stored[OFFLOADED] and stored["name"].startswith(f"model-calls/{key.node}/message-")
    names = {info.name for info in ArtifactRegistry(store).versions(run_id, None)}
    assert names == {call.response["name"], stored["name"]}
    replayed = ctx(live=False).model(openai_client).chat.completions.create(**asked)
    assert replayed.choices[0].message.content == answer.choices[0].message.content
    assert server.count() == 1


def test_cached_input_tokens_are_charged_and_priced_at_their_own_rate(
    store: Store, server: ModelServer, openai_client: OpenAI, claude: Anthropic
) -> None:
    """OpenAI counts cached tokens inside its input, Anthropic apart from it: both are
    charged as input, the cached part also as ``cached_tokens``, priced at its rate."""
    prices = Settings(model_prices="m=2/8/0.5").model_prices
    assert prices == {"m": (2.0, 8.0, 0.5)}
    _run_id, key, _at = started(store)
    ctx = _ctx(store, key, prices=prices)
    server.script(
        Reply(text="a", input_tokens=1000, output_tokens=100, cached_tokens=800),
        Reply(text="b", input_tokens=200, output_tokens=100, cached_tokens=800),
    )
    asked: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    ctx.model(openai_client).chat.completions.create(**asked)
    ctx.model(claude).messages.create(**asked, max_tokens=64)
    assert ctx.charges["input_tokens"] == 1000 + (200 + 800)
    assert ctx.charges["cached_tokens"] == 800 + 800
    assert ctx.charges["tokens"] == 2000 + 200
    fresh, cached, out = 200 + 200, 1600, 200
    assert ctx.charges["usd"] == pytest.approx((fresh * 2 + cached * 0.5 + out * 8) / 1e6)
    with pytest.raises(ValueError, match="INPUT/OUTPUT/CACHED"):
        Settings(model_prices="m=1/2/3/4")
