"""The model stand-in against the real OpenAI and Anthropic SDKs: replies, tool calls, usage,
streaming and faults, through each SDK's sync and async clients."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from anthropic import Anthropic, AsyncAnthropic
from openai import AsyncOpenAI, OpenAI

from cairn.testing.model_server import (
    Fault,
    ModelServer,
    Reply,
    Request,
    ToolCall,
    estimate_tokens,
)
from tests.support.services import ROOT

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the weather in Oslo?"},
]
CLAUDE_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "What is the weather in Oslo?"}]}
]
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CLAUDE_WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALLS = (
    ToolCall("get_weather", {"city": "Oslo", "units": ["celsius"]}),
    ToolCall("get_time", {"zone": "Europe/Oslo"}, id="fixed-id"),
)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture
def gpt(server: ModelServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(server: ModelServer) -> Iterator[Anthropic]:
    with Anthropic(base_url=server.anthropic_base_url, api_key="test", max_retries=0) as client:
        yield client


def _chat(client: OpenAI, **kwargs: Any) -> Any:
    return client.chat.completions.create(model="gpt-test", messages=MESSAGES, **kwargs)


def _claude(client: Anthropic, **kwargs: Any) -> Any:
    return client.messages.create(
        model="claude-test", max_tokens=256, system="Be brief.", messages=CLAUDE_MESSAGES, **kwargs
    )


# --- OpenAI chat completions ---------------------------------------------------------------


def test_openai_reply_as_scripted_and_the_request_logged(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Reply(text="Rain.", input_tokens=42, output_tokens=7, cached_tokens=5))

    completion = _chat(gpt)

    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Rain.", "stop")
    assert choice.message.tool_calls is None
    assert completion.model == "gpt-test"
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (42, 7, 49)
    assert usage.prompt_tokens_details.cached_tokens == 5
    [request] = server.requests
    assert (request.provider, request.path, request.stream) == (
        "openai",
        "/v1/chat/completions",
        False,
    )
    assert request.body["messages"] == MESSAGES
    assert request.body["model"] == "gpt-test"
    assert request.headers["authorization"] == "Bearer test"


def test_openai_default_replies_are_numbered_with_usage_estimated(
    server: ModelServer, gpt: OpenAI
) -> None:
    first, second = _chat(gpt), _chat(gpt)

    assert [first.choices[0].message.content, second.choices[0].message.content] == [
        "reply 0",
        "reply 1",
    ]
    assert first.usage.prompt_tokens == estimate_tokens("Be brief.What is the weather in Oslo?")
    assert first.usage.completion_tokens == estimate_tokens("reply 0")
    assert first.usage.prompt_tokens_details.cached_tokens == 0


def test_openai_tool_calls(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Reply(tool_calls=CALLS))

    completion = _chat(gpt, tools=[WEATHER_TOOL])

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo", "units": ["celsius"]}),
        ("get_time", {"zone": "Europe/Oslo"}),
    ]
    assert calls[0].id.startswith("call_")
    assert calls[1].id == "fixed-id"
    assert server.requests[0].body["tools"] == [WEATHER_TOOL]


def test_openai_async_reply_and_tool_call(server: ModelServer) -> None:
    server.script(
        Reply(tool_calls=CALLS[:1], input_tokens=3, output_tokens=4), Reply(text="Sunny.")
    )

    async def scenario() -> tuple[Any, Any]:
        async with AsyncOpenAI(
            base_url=server.openai_base_url, api_key="test", max_retries=0
        ) as client:
            call = await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
            answer = await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
            return call, answer

    call, answer = asyncio.run(scenario())

    tool_call = call.choices[0].message.tool_calls[0]
    assert json.loads(tool_call.function.arguments) == {"city": "Oslo", "units": ["celsius"]}
    assert (call.usage.prompt_tokens, call.usage.completion_tokens) == (3, 4)
    assert answer.choices[0].message.content == "Sunny."
    assert server.count("openai") == 2


def _reassemble_chat(chunks: list[Any]) -> tuple[str, dict[int, dict[str, str]], str | None]:
    text, calls, finish = "", {}, None
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    return text, calls, finish


def test_openai_stream_text_tool_calls_and_usage(server: ModelServer, gpt: OpenAI) -> None:
    server.script(
        Reply(text="Let me look that up.", tool_calls=CALLS, input_tokens=11, output_tokens=22)
    )

    chunks = list(_chat(gpt, stream=True, stream_options={"include_usage": True}))

    text, calls, finish = _reassemble_chat(chunks)
    assert text == "Let me look that up."
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 5  # a word each
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (call.name, call.arguments) for call in CALLS
    ]
    assert calls[1]["id"] == "fixed-id"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.tool_calls) > 4  # pieces
    assert finish == "tool_calls"
    assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert (chunks[-1].choices, chunks[-1].usage.total_tokens) == ([], 33)
    assert server.requests[0].stream


def test_openai_stream_without_include_usage_has_no_usage(gpt: OpenAI) -> None:
    chunks = list(_chat(gpt, stream=True))

    assert _reassemble_chat(chunks)[::2] == ("reply 0", "stop")
    assert all(chunk.usage is None for chunk in chunks)


def test_openai_stream_helper_final_completion(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Reply(text="Calling.", tool_calls=CALLS[:1]))

    with gpt.chat.completions.stream(model="gpt-test", messages=MESSAGES) as stream:
        final = stream.get_final_completion()

    message = final.choices[0].message
    assert message.content == "Calling."
    assert json.loads(message.tool_calls[0].function.arguments)["city"] == "Oslo"


def test_openai_async_stream(server: ModelServer) -> None:
    server.script(Reply(text="Sunny and mild.", input_tokens=5, output_tokens=6))

    async def scenario() -> list[Any]:
        async with AsyncOpenAI(
            base_url=server.openai_base_url, api_key="test", max_retries=0
        ) as client:
            stream = await client.chat.completions.create(
                model="gpt-test",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(scenario())

    assert _reassemble_chat(chunks)[::2] == ("Sunny and mild.", "stop")
    assert chunks[-1].usage.prompt_tokens == 5


def test_openai_stream_chunks_arrive_as_they_are_sent(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Reply(text="one two three four five", chunk_delay_s=0.05))

    arrivals = [time.monotonic() for _ in _chat(gpt, stream=True)]

    # Seven pauses between eight chunks: the first is read long before the last is sent.
    assert len(arrivals) == 7
    assert arrivals[-1] - arrivals[0] >= 0.2


def test_openai_responses_api(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Reply(text="Rain.", input_tokens=9, output_tokens=2), Reply(tool_calls=CALLS))

    response = gpt.responses.create(model="gpt-test", input="Weather in Oslo?")
    with gpt.responses.stream(model="gpt-test", input="Weather in Oslo?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        streamed = stream.get_final_response()

    assert (response.output_text, response.model, response.status) == (
        "Rain.",
        "gpt-test",
        "completed",
    )
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 2)
    calls = [item for item in streamed.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        (call.name, call.arguments) for call in CALLS
    ]
    assert len(deltas) > 2
    assert [r.path for r in server.requests] == ["/v1/responses"] * 2


# --- Anthropic messages --------------------------------------------------------------------


def test_anthropic_reply_as_scripted_and_the_request_logged(
    server: ModelServer, claude: Anthropic
) -> None:
    server.script(Reply(text="Rain.", input_tokens=42, output_tokens=7, cached_tokens=5))

    message = _claude(claude)

    assert [(block.type, block.text) for block in message.content] == [("text", "Rain.")]
    assert (message.stop_reason, message.model) == ("end_turn", "claude-test")
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens) == (42, 7, 5)
    [request] = server.requests
    assert (request.provider, request.path, request.stream) == ("anthropic", "/v1/messages", False)
    assert request.body["messages"] == CLAUDE_MESSAGES
    assert request.body["system"] == "Be brief."
    assert "anthropic-version" in request.headers


def test_anthropic_default_replies_are_numbered_with_usage_estimated(
    server: ModelServer, claude: Anthropic
) -> None:
    first, second = _claude(claude), _claude(claude)

    assert [first.content[0].text, second.content[0].text] == ["reply 0", "reply 1"]
    assert first.usage.input_tokens == estimate_tokens("Be brief.What is the weather in Oslo?")
    assert first.usage.output_tokens == estimate_tokens("reply 0")
    assert first.usage.cache_read_input_tokens == 0


def test_anthropic_tool_use(server: ModelServer, claude: Anthropic) -> None:
    server.script(Reply(text="Looking.", tool_calls=CALLS))

    message = _claude(claude, tools=[CLAUDE_WEATHER_TOOL])

    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "text"
    uses = [block for block in message.content if block.type == "tool_use"]
    assert [(use.name, use.input) for use in uses] == [(c.name, c.arguments) for c in CALLS]
    assert uses[0].id.startswith("toolu_")
    assert uses[1].id == "fixed-id"


def test_anthropic_async_reply_and_tool_use(server: ModelServer) -> None:
    server.script(
        Reply(tool_calls=CALLS[:1], input_tokens=3, output_tokens=4), Reply(text="Sunny.")
    )

    async def scenario() -> tuple[Any, Any]:
        async with AsyncAnthropic(
            base_url=server.anthropic_base_url, api_key="test", max_retries=0
        ) as client:
            kwargs: dict[str, Any] = {
                "model": "claude-test",
                "max_tokens": 64,
                "messages": CLAUDE_MESSAGES,
            }
            return await client.messages.create(**kwargs), await client.messages.create(**kwargs)

    call, answer = asyncio.run(scenario())

    assert (call.content[0].type, call.content[0].input) == ("tool_use", CALLS[0].arguments)
    assert (call.usage.input_tokens, call.usage.output_tokens) == (3, 4)
    assert answer.content[0].text == "Sunny."
    assert server.count("anthropic") == 2


def test_anthropic_raw_stream_events(server: ModelServer, claude: Anthropic) -> None:
    server.script(Reply(text="Let me look that up.", tool_calls=CALLS, output_tokens=30))

    events = list(_claude(claude, stream=True))

    kinds = [event.type for event in events]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 3
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Let me look that up."
    json_parts: dict[int, str] = {}
    for e in events:
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            json_parts[e.index] = json_parts.get(e.index, "") + e.delta.partial_json
    assert [json.loads(part) for part in json_parts.values()] == [c.arguments for c in CALLS]
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [(b.type, getattr(b, "name", None)) for b in starts] == [
        ("text", None),
        ("tool_use", "get_weather"),
        ("tool_use", "get_time"),
    ]
    assert events[0].message.usage.input_tokens > 0
    assert (events[-2].delta.stop_reason, events[-2].usage.output_tokens) == ("tool_use", 30)


def test_anthropic_stream_helper_final_message(server: ModelServer, claude: Anthropic) -> None:
    server.script(
        Reply(
            text="Calling.", tool_calls=CALLS[:1], input_tokens=12, output_tokens=9, cached_tokens=4
        )
    )

    with claude.messages.stream(
        model="claude-test", max_tokens=64, messages=CLAUDE_MESSAGES
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()

    assert "".join(texts) == "Calling."
    assert len(texts) == 1
    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[1].input == CALLS[0].arguments
    assert final.stop_reason == "tool_use"
    usage = final.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens) == (12, 9, 4)


def test_anthropic_async_stream_helper(server: ModelServer) -> None:
    server.script(Reply(text="Sunny and mild.", input_tokens=5, output_tokens=6))

    async def scenario() -> tuple[list[str], Any]:
        async with (
            AsyncAnthropic(
                base_url=server.anthropic_base_url, api_key="test", max_retries=0
            ) as client,
            client.messages.stream(
                model="claude-test", max_tokens=64, messages=CLAUDE_MESSAGES
            ) as stream,
        ):
            texts = [text async for text in stream.text_stream]
            return texts, await stream.get_final_message()

    texts, final = asyncio.run(scenario())

    assert texts == ["Sunny ", "and ", "mild."]
    assert (final.content[0].text, final.usage.output_tokens) == ("Sunny and mild.", 6)


def test_anthropic_stream_chunks_arrive_as_they_are_sent(
    server: ModelServer, claude: Anthropic
) -> None:
    server.script(Reply(text="one two three four five", chunk_delay_s=0.05))

    arrivals = [time.monotonic() for _ in _claude(claude, stream=True)]

    # start, block start, five deltas, block stop, message delta, stop: nine pauses.
    assert len(arrivals) == 10
    assert arrivals[-1] - arrivals[0] >= 0.3


# --- both providers ------------------------------------------------------------------------


def test_one_script_serves_both_providers_in_order(
    server: ModelServer, gpt: OpenAI, claude: Anthropic
) -> None:
    server.script(
        Reply(text="first", finish_reason="length"), Reply(text="second", finish_reason="length")
    )

    openai_choice = _chat(gpt).choices[0]
    claude_message = _claude(claude)

    assert (openai_choice.message.content, openai_choice.finish_reason) == ("first", "length")
    # A finish reason in OpenAI's words reaches Anthropic's clients in theirs.
    assert (claude_message.content[0].text, claude_message.stop_reason) == ("second", "max_tokens")
    assert _chat(gpt).choices[0].message.content == "reply 0"


def test_count_reset_and_default_numbering(
    server: ModelServer, gpt: OpenAI, claude: Anthropic
) -> None:
    server.script(Reply(text="scripted"))
    replies = [
        _chat(gpt).choices[0].message.content,
        _claude(claude).content[0].text,
        _chat(gpt).choices[0].message.content,
    ]

    assert replies == ["scripted", "reply 0", "reply 1"]
    assert (server.count(), server.count("openai"), server.count("anthropic")) == (3, 2, 1)
    assert [r.provider for r in server.requests] == ["openai", "anthropic", "openai"]
    assert server.requests[0].at <= server.requests[1].at <= server.requests[2].at

    server.script(Reply(text="never sent"))
    server.reset()

    assert (server.count(), server.requests) == (0, [])
    assert _claude(claude).content[0].text == "reply 0"
    assert server.count("anthropic") == 1


def test_a_client_pointed_at_the_wrong_base_url_is_told_so(server: ModelServer) -> None:
    with (
        OpenAI(base_url=server.url, api_key="test", max_retries=0) as client,
        pytest.raises(openai.NotFoundError, match="openai_base_url"),
    ):
        _chat(client)
    assert server.count() == 0


def test_a_fault_takes_exactly_one_kind() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Fault()
    with pytest.raises(ValueError, match="exactly one"):
        Fault(status=500, hang=True)
    with pytest.raises(ValueError, match="error status"):
        Fault(status=200)
    with pytest.raises(ValueError, match="retry_after_s"):
        Fault(hang=True, retry_after_s=1)


# --- a responder ---------------------------------------------------------------------------


def _echo(request: Request) -> Reply | Fault | None:
    """Plays a model from the request: repeats the last message, asks for a tool when the
    message names one offered, rate-limits on "slow down", leaves "pass" to the default."""
    said = str(request.body["messages"][-1]["content"])
    if said == "pass":
        return None
    if said == "slow down":
        return Fault(status=429, retry_after_s=1)
    offered = [tool["function"]["name"] for tool in request.body.get("tools", [])]
    if said in offered:
        return Reply(tool_calls=(ToolCall(said, {"asked": said}),))
    return Reply(text=f"you said: {said}")


def _say(client: OpenAI, text: str, **kwargs: Any) -> Any:
    messages = [{"role": "user", "content": text}]
    return client.chat.completions.create(model="gpt-test", messages=messages, **kwargs)


def test_a_responder_answers_what_the_script_does_not() -> None:
    with (
        ModelServer(responder=_echo) as server,
        OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0) as gpt,
    ):
        server.script(Reply(text="scripted"))  # a scripted reply still comes first
        replies = [_say(gpt, "hello"), _say(gpt, "hello"), _say(gpt, "pass"), _say(gpt, "pass")]
        assert [r.choices[0].message.content for r in replies] == [
            "scripted",
            "you said: hello",
            "reply 0",  # None: the default reply, numbered among the default replies only
            "reply 1",
        ]
        # Usage is the stand-in's estimate, as for a scripted reply without counts.
        assert replies[1].usage.completion_tokens == estimate_tokens("you said: hello")
        assert replies[1].usage.prompt_tokens == estimate_tokens("hello")

        called = _say(gpt, "get_weather", tools=[WEATHER_TOOL])
        (call,) = called.choices[0].message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == (
            "get_weather",
            {"asked": "get_weather"},
        )
        assert called.choices[0].finish_reason == "tool_calls"
        with pytest.raises(openai.RateLimitError) as limited:
            _say(gpt, "slow down")
        assert limited.value.response.headers["retry-after"] == "1"
        assert server.count() == 6  # every request logged, whoever answered it


def test_a_responder_streams_and_can_be_swapped(server: ModelServer, gpt: OpenAI) -> None:
    assert _say(gpt, "hi").choices[0].message.content == "reply 0"
    server.responder = _echo
    stream = _say(gpt, "streamed words", stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "you said: streamed words"
    server.reset()  # forgets requests and the queue, keeps the responder
    assert _say(gpt, "again").choices[0].message.content == "you said: again"
    assert server.count() == 1


def test_a_responder_that_fails_is_a_500_naming_it(
    server: ModelServer, gpt: OpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(request: Request) -> Reply:
        raise KeyError("messages")

    def confused(request: Request) -> Any:
        return "The answer is 4."

    server.responder = broken
    with pytest.raises(openai.InternalServerError, match=r"broken raised KeyError\('messages'\)"):
        _say(gpt, "hi")
    assert "KeyError" in capsys.readouterr().err  # the traceback, for whoever runs it
    server.responder = confused
    with pytest.raises(openai.InternalServerError, match="answered str, not a Reply"):
        _say(gpt, "hi")
    assert server.count() == 2


def test_the_module_serves_a_responder_named_on_its_command_line() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cairn.testing.model_server",
            "--port",
            "0",
            "--responder",
            "examples.calculator_model:respond",
        ],
        cwd=ROOT,  # where the examples are importable from
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[-1]
        tool = {"type": "function", "function": {"name": "calculate", "parameters": {}}}
        with OpenAI(base_url=url + "/v1", api_key="test", max_retries=0) as client:
            asked = _say(client, "2 + 3", tools=[tool]).choices[0].message.tool_calls
            answered = _say(client, "7", tools=[tool]).choices[0].message.content
        assert [(c.function.name, json.loads(c.function.arguments)) for c in asked] == [
            ("calculate", {"left": 2, "op": "+", "right": 3})
        ]
        assert answered == "The answer is 7."
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_an_unknown_responder_is_refused_at_start() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cairn.testing.model_server", "--responder", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2  # argparse's usage error, not a traceback
    assert "--responder: a responder is named module:function, not 'examples'" in done.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "cairn.testing.model_server", "--responder", "examples.nope:f"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert missing.returncode == 2
    assert "No module named 'examples.nope'" in missing.stderr


# --- faults --------------------------------------------------------------------------------


def test_openai_rate_limit_and_server_error(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Fault(status=429, retry_after_s=2), Fault(status=500))

    with pytest.raises(openai.RateLimitError) as limited:
        _chat(gpt)
    with pytest.raises(openai.InternalServerError) as failed:
        _chat(gpt)

    assert limited.value.response.headers["retry-after"] == "2"
    assert limited.value.response.headers["x-should-retry"] == "true"
    assert limited.value.code == "rate_limit_exceeded"
    assert limited.value.request_id is not None
    assert failed.value.status_code == 500
    assert "retry-after" not in failed.value.response.headers
    assert server.count() == 2


def test_anthropic_rate_limit_and_server_error(server: ModelServer, claude: Anthropic) -> None:
    server.script(Fault(status=429, retry_after_s=2), Fault(status=500), Fault(status=529))

    with pytest.raises(anthropic.RateLimitError) as limited:
        _claude(claude)
    with pytest.raises(anthropic.InternalServerError) as failed:
        _claude(claude)
    with pytest.raises(anthropic.OverloadedError):
        _claude(claude)

    assert limited.value.response.headers["retry-after"] == "2"
    assert limited.value.type == "rate_limit_error"
    assert limited.value.request_id is not None
    assert (failed.value.status_code, failed.value.type) == (500, "api_error")


def test_default_retries_get_past_a_rate_limit(server: ModelServer) -> None:
    server.script(Fault(status=429, retry_after_s=0.01), Reply(text="after the wait"))
    with OpenAI(base_url=server.openai_base_url, api_key="test") as client:
        assert _chat(client).choices[0].message.content == "after the wait"
    assert server.count() == 2
    assert server.requests[1].headers["x-stainless-retry-count"] == "1"

    server.reset()
    server.script(Fault(status=503, retry_after_s=0.01), Reply(text="after the wait"))
    with Anthropic(base_url=server.anthropic_base_url, api_key="test") as client:
        assert _claude(client).content[0].text == "after the wait"
    assert server.count() == 2


def test_context_length_exceeded(server: ModelServer, gpt: OpenAI, claude: Anthropic) -> None:
    server.script(Fault(context_length=True), Fault(context_length=True))

    with pytest.raises(openai.BadRequestError) as too_long_for_gpt:
        _chat(gpt)
    with pytest.raises(anthropic.BadRequestError) as too_long_for_claude:
        _claude(claude)

    assert too_long_for_gpt.value.code == "context_length_exceeded"
    assert "maximum context length" in too_long_for_gpt.value.message
    assert too_long_for_claude.value.type == "invalid_request_error"
    assert "prompt is too long" in str(too_long_for_claude.value.api_message)


def test_a_hung_request_times_out(server: ModelServer, gpt: OpenAI, claude: Anthropic) -> None:
    server.script(Fault(hang=True), Fault(hang=True))

    with pytest.raises(openai.APITimeoutError):
        _chat(gpt, timeout=0.2)
    with pytest.raises(anthropic.APITimeoutError):
        _claude(claude, timeout=0.2)

    assert server.count() == 2


def test_an_async_hung_request_times_out(server: ModelServer) -> None:
    server.script(Fault(hang=True))

    async def scenario() -> None:
        async with AsyncAnthropic(
            base_url=server.anthropic_base_url, api_key="test", max_retries=0
        ) as client:
            await client.messages.create(
                model="claude-test", max_tokens=64, messages=CLAUDE_MESSAGES, timeout=0.2
            )

    with pytest.raises(anthropic.APITimeoutError):
        asyncio.run(scenario())


def test_stop_releases_a_hung_request(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Fault(hang=True))
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            _chat(gpt, timeout=30)
        except openai.APIError as error:
            outcome.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 5
    while server.count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    caller.join(timeout=5)

    assert time.monotonic() - started < 2
    assert [type(error) for error in outcome] == [openai.APIConnectionError]


def test_a_dropped_openai_stream_fails_after_its_chunks(server: ModelServer, gpt: OpenAI) -> None:
    server.script(Fault(drop_after_chunks=2))
    received: list[Any] = []

    with pytest.raises(openai.APIConnectionError):
        received.extend(_chat(gpt, stream=True))

    assert len(received) == 2


def test_a_dropped_anthropic_stream_fails_after_its_chunks(
    server: ModelServer, claude: Anthropic
) -> None:
    server.script(Fault(drop_after_chunks=2))
    received: list[Any] = []

    # Anthropic's SDK lets the transport's error through unwrapped.
    with pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)):
        received.extend(_claude(claude, stream=True))

    assert [event.type for event in received] == ["message_start", "content_block_start"]


def test_a_dropped_async_stream_fails(server: ModelServer) -> None:
    server.script(Fault(drop_after_chunks=2))

    async def scenario() -> list[Any]:
        received: list[Any] = []
        async with AsyncOpenAI(
            base_url=server.openai_base_url, api_key="test", max_retries=0
        ) as client:
            stream = await client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, stream=True
            )
            try:
                async for chunk in stream:
                    received.append(chunk)
            except openai.APIConnectionError:
                return received
        raise AssertionError("the stream ended without an error")

    assert len(asyncio.run(scenario())) == 2


# --- the command ---------------------------------------------------------------------------


def test_the_module_serves_until_interrupted() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "cairn.testing.model_server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[-1]
        assert url.startswith("http://127.0.0.1:")
        with Anthropic(base_url=url, api_key="test", max_retries=0) as client:
            assert _claude(client).content[0].text == "reply 0"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_a_concurrency_limit_refuses_what_is_past_it_and_counts_the_peak() -> None:
    """The stand-in as a provider with a concurrency limit: a request past it is a 429,
    counted; the peak of requests answered at once is kept."""
    import concurrent.futures  # noqa: PLC0415

    from openai import OpenAI, RateLimitError  # noqa: PLC0415

    with ModelServer(limit_in_flight=2) as server:
        server.script(*(Reply(text="slow", delay_s=0.5) for _ in range(3)))
        client = OpenAI(base_url=server.openai_base_url, api_key="t", max_retries=0)

        def ask() -> str:
            try:
                reply = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
            except RateLimitError:
                return "refused"
            return str(reply.choices[0].message.content)

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = sorted(pool.map(lambda _: ask(), range(3)))
        assert answers == ["refused", "slow", "slow"]
        assert server.peak_in_flight == 2 and server.over_limit == 1
        assert ask() == "slow"  # the limit frees with the answers
