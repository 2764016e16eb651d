"""A stand-in for the OpenAI and Anthropic model APIs, for tests and the demo.

:class:`ModelServer` is a small local HTTP server that speaks enough of the OpenAI
chat-completions (and Responses) wire format and of the Anthropic messages wire format for
the providers' official SDKs to work against it unchanged: plain replies, tool calls, usage,
server-sent-event streaming, and the failures a real provider produces — rate limits, server
errors, an exceeded context window, a request that never gets an answer, a stream cut off
half way. Tests script what the "model" answers, and read back what it was asked.

Point each SDK at it through ``base_url``; ``max_retries=0`` keeps a scripted fault from
being retried behind the test's back::

    from anthropic import Anthropic
    from openai import OpenAI

    from cairn.testing.model_server import Fault, ModelServer, Reply, ToolCall

    with ModelServer() as server:
        gpt = OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0)
        claude = Anthropic(base_url=server.anthropic_base_url, api_key="test", max_retries=0)

        # The model first asks for a tool, then answers once it has seen the result.
        server.script(
            Reply(tool_calls=(ToolCall("get_weather", {"city": "Oslo"}),)),
            Reply(text="It is raining in Oslo.", input_tokens=120, output_tokens=8),
        )
        first = gpt.chat.completions.create(model="gpt-test", messages=[...], tools=[...])
        first.choices[0].message.tool_calls[0].function.arguments  # '{"city": "Oslo"}'
        final = gpt.chat.completions.create(model="gpt-test", messages=[...])
        final.choices[0].message.content  # 'It is raining in Oslo.'

        server.script(Fault(status=429, retry_after_s=2))  # the next request is rate limited
        claude.messages.create(model="claude-test", max_tokens=64, messages=[...])  # RateLimitError
        server.requests[0].body["messages"]  # what the model was sent, exactly

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/responses`` (OpenAI; the SDK's
``base_url`` is ``<url>/v1``) and ``POST /v1/messages`` (Anthropic; ``base_url`` is ``<url>``).
Scripted replies and faults are consumed in order by the next requests, whichever provider
they are for. When none is queued, the server's *responder* is asked, if it has one: a
callable ``(Request) -> Reply | Fault | None`` that plays the model from what the request
says (``ModelServer(responder=...)``; ``examples/calculator_model.py`` is one). Failing
that (no responder, or it answered ``None``) a request gets the default reply
``"reply <n>"``, ``n`` counting the default replies given so far, so that a test can tell
turns apart. A responder that raises is answered as a 500 naming the exception. A reply's
finish reason may be given in either provider's words (``"tool_calls"`` or ``"tool_use"``):
it is translated for the provider asked.

Run ``python -m cairn.testing.model_server --port 8765 [--responder module:function]`` to
serve until interrupted.

The module is a server: it imports neither SDK, nor anything from cairn.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import math
import re
import select
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, cast
from urllib.parse import urlsplit

__all__ = [
    "Fault",
    "ModelServer",
    "Reply",
    "Request",
    "Responder",
    "ToolCall",
    "estimate_tokens",
]

Provider = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ToolCall:
    """A tool the model asks to call: OpenAI gets ``arguments`` as a JSON string, Anthropic
    as the ``input`` object. An ``id`` left out is generated (``call_…`` / ``toolu_…``)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """What the model answers to one request.

    ``finish_reason`` defaults to ``tool_calls``/``tool_use`` when there are tool calls, else
    ``stop``/``end_turn``. The token counts default to :func:`estimate_tokens` of the
    request's message text and of the reply; they are reported as given, in each provider's
    own terms (OpenAI counts cached tokens inside ``prompt_tokens``, Anthropic does not count
    them in ``input_tokens``). ``chunk_delay_s`` paces a streamed reply; ``delay_s`` holds
    the whole answer back.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    chunk_delay_s: float = 0.0
    delay_s: float = 0.0


@dataclass(frozen=True)
class Fault:
    """A failure in place of a reply; set exactly one of ``status``, ``hang``,
    ``drop_after_chunks`` and ``context_length``.

    ``status``: answer with this HTTP status and an error body in the provider's format.
    ``retry_after_s``: with an error, send ``Retry-After`` (and, to OpenAI, ``x-should-retry:
    true``); fractions of a second are sent as a decimal, which both SDKs accept.
    ``hang``: read the request, then never answer, until the server stops.
    ``drop_after_chunks``: stream that many server-sent events, then close the connection
    mid-body (a non-streaming request gets its headers and half its body).
    ``context_length``: answer 400 with the provider's context-window-exceeded error.
    """

    status: int | None = None
    retry_after_s: float | None = None
    hang: bool = False
    drop_after_chunks: int | None = None
    context_length: bool = False

    def __post_init__(self) -> None:
        kinds = [
            self.status is not None,
            self.hang,
            self.drop_after_chunks is not None,
            self.context_length,
        ]
        if sum(kinds) != 1:
            raise ValueError(
                "a Fault takes exactly one of status, hang, drop_after_chunks, context_length"
            )
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"a Fault's status is an HTTP error status, not {self.status}")
        if self.retry_after_s is not None and self.status is None and not self.context_length:
            raise ValueError("retry_after_s goes with an error status")
        if self.drop_after_chunks is not None and self.drop_after_chunks < 0:
            raise ValueError("drop_after_chunks cannot be negative")


@dataclass(frozen=True)
class Request:
    """One request the server received. ``headers`` has lower-case names, as the SDKs
    differ in how they spell them."""

    provider: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    stream: bool
    at: float
    # Answered 429 by the stand-in's own limits (limit_in_flight, limit_requests).
    refused: bool = False


# Plays the model for the requests no script answers; None: the default reply.
Responder = Callable[[Request], Reply | Fault | None]


class _ResponderFailed(Exception):
    """The responder raised, or answered something that is not a reply."""


def estimate_tokens(text: str) -> int:
    """The default token count of ``text``: about four characters a token, as the
    providers' rule of thumb has it, and never below one."""
    return max(1, math.ceil(len(text) / 4))


# The endpoint each path serves: (provider, API).
_ROUTES: dict[str, tuple[Provider, str]] = {
    "/v1/chat/completions": ("openai", "chat"),
    "/v1/responses": ("openai", "responses"),
    "/v1/messages": ("anthropic", "messages"),
}

# The two vocabularies of finish reasons, so that one script can serve either provider.
_TO_ANTHROPIC = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_TO_OPENAI = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "stop_sequence": "stop",
    "refusal": "content_filter",
}

# A dropped stream still needs something to stream before it breaks off.
_CUT_OFF_TEXT = "this stream is cut off before it ends"

# Message fields that are not text the model reads, left out of the input estimate.
_NOT_TEXT = frozenset({"role", "type", "id", "tool_call_id", "tool_use_id", "call_id"})

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_ERROR_MESSAGES = {
    400: "Bad request.",
    401: "Incorrect API key provided.",
    403: "You are not allowed to make this request.",
    404: "Not found.",
    408: "Request timed out.",
    409: "Conflict.",
    413: "Request too large.",
    422: "Unprocessable request.",
    429: "Rate limit reached for requests. Please try again later.",
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The service is temporarily unavailable. Please try again later.",
    504: "The request timed out.",
    529: "Overloaded",
}

_CONTEXT_WINDOW = 200_000


def _message_text(body: dict[str, Any]) -> str:
    parts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if key not in _NOT_TEXT:
                    walk(item)

    for key in ("system", "instructions", "messages", "input"):
        walk(body.get(key))
    return "".join(parts)


def _reply_text(reply: Reply) -> str:
    calls = "".join(call.name + json.dumps(call.arguments) for call in reply.tool_calls)
    return reply.text + calls


def _words(text: str) -> list[str]:
    """``text`` in the pieces a stream sends it in: a word with the space after it."""
    pieces = re.findall(r"\s*\S+\s*", text)
    return pieces or ([text] if text else [])


def _slices(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


@dataclass
class _Answer:
    """What a handler writes back: a JSON body, or a stream of server-sent events."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    events: list[bytes] | None = None


@dataclass
class _Turn:
    """One request being answered: its reply, with the token counts settled."""

    reply: Reply
    body: dict[str, Any]
    model: str
    input_tokens: int
    output_tokens: int
    new_id: Callable[[str], str]
    tool_ids: list[str]

    @classmethod
    def of(cls, reply: Reply, body: dict[str, Any], new_id: Callable[[str], str]) -> _Turn:
        input_tokens = reply.input_tokens
        if input_tokens is None:
            input_tokens = estimate_tokens(_message_text(body))
        output_tokens = reply.output_tokens
        if output_tokens is None:
            output_tokens = estimate_tokens(_reply_text(reply))
        return cls(
            reply=reply,
            body=body,
            model=str(body.get("model") or "model-server"),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            new_id=new_id,
            tool_ids=[],
        )

    def call_ids(self, prefix: str) -> list[str]:
        if not self.tool_ids:
            self.tool_ids = [call.id or self.new_id(prefix) for call in self.reply.tool_calls]
        return self.tool_ids

    def finish(self, provider: Provider) -> str:
        reason = self.reply.finish_reason
        if provider == "anthropic":
            if reason is None:
                return "tool_use" if self.reply.tool_calls else "end_turn"
            return _TO_ANTHROPIC.get(reason, reason)
        if reason is None:
            return "tool_calls" if self.reply.tool_calls else "stop"
        return _TO_OPENAI.get(reason, reason)


def _json_answer(status: int, payload: dict[str, Any], headers: dict[str, str]) -> _Answer:
    return _Answer(
        status, {"content-type": "application/json", **headers}, json.dumps(payload).encode()
    )


def _stream_answer(events: list[bytes], headers: dict[str, str]) -> _Answer:
    return _Answer(
        200,
        {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            **headers,
        },
        events=events,
    )


# --- OpenAI chat completions ------------------------------------------------------------


def _openai_usage(turn: _Turn) -> dict[str, Any]:
    return {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
        "prompt_tokens_details": {"cached_tokens": turn.reply.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_completion(turn: _Turn, headers: dict[str, str]) -> _Answer:
    reply = turn.reply
    message: dict[str, Any] = {
        "role": "assistant",
        # The API sends null, not "", for a turn that only calls tools.
        "content": reply.text if reply.text or not reply.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call, call_id in zip(reply.tool_calls, turn.call_ids("call_"), strict=True)
        ]
    payload = {
        "id": turn.new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": turn.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": turn.finish("openai"),
            }
        ],
        "usage": _openai_usage(turn),
        "service_tier": "default",
        "system_fingerprint": None,
    }
    return _json_answer(200, payload, headers)


def _chat_completion_stream(turn: _Turn, headers: dict[str, str]) -> _Answer:
    reply = turn.reply
    options = turn.body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    base: dict[str, Any] = {
        "id": turn.new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": turn.model,
        "service_tier": "default",
        "system_fingerprint": None,
    }
    if include_usage:
        # With include_usage every chunk carries "usage": null until the last one.
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _sse({**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in _words(reply.text)]
    for index, (call, call_id) in enumerate(
        zip(reply.tool_calls, turn.call_ids("call_"), strict=True)
    ):
        # The id and name come once, in the first delta: the SDK's accumulator concatenates
        # every string it sees again.
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [opening]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _slices(json.dumps(call.arguments))
        ]
    events.append(chunk({}, turn.finish("openai")))
    if include_usage:
        events.append(_sse({**base, "choices": [], "usage": _openai_usage(turn)}))
    events.append(b"data: [DONE]\n\n")
    return _stream_answer(events, headers)


# --- OpenAI responses -------------------------------------------------------------------


def _responses_items(turn: _Turn) -> list[dict[str, Any]]:
    reply = turn.reply
    items: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        items.append(
            {
                "type": "message",
                "id": turn.new_id("msg_"),
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
                ],
            }
        )
    for call, call_id in zip(reply.tool_calls, turn.call_ids("call_"), strict=True):
        items.append(
            {
                "type": "function_call",
                "id": turn.new_id("fc_"),
                "call_id": call_id,
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
        )
    return items


def _response_object(
    turn: _Turn, response_id: str, created: float, output: list[dict[str, Any]], done: bool
) -> dict[str, Any]:
    incomplete = turn.finish("openai") == "length"
    status = ("incomplete" if incomplete else "completed") if done else "in_progress"
    body = turn.body
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "completed_at": time.time() if done else None,
        "model": turn.model,
        "output": output,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if done and incomplete else None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "previous_response_id": body.get("previous_response_id"),
        "usage": {
            "input_tokens": turn.input_tokens,
            "input_tokens_details": {
                "cached_tokens": turn.reply.cached_tokens,
                "cache_write_tokens": 0,
            },
            "output_tokens": turn.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": turn.input_tokens + turn.output_tokens,
        }
        if done
        else None,
    }


def _response(turn: _Turn, headers: dict[str, str]) -> _Answer:
    payload = _response_object(
        turn, turn.new_id("resp_"), time.time(), _responses_items(turn), done=True
    )
    return _json_answer(200, payload, headers)


def _response_stream(turn: _Turn, headers: dict[str, str]) -> _Answer:
    response_id = turn.new_id("resp_")
    created = time.time()
    items = _responses_items(turn)
    sequence = itertools.count()
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(_sse({"type": kind, "sequence_number": next(sequence), **fields}, kind))

    opening = _response_object(turn, response_id, created, [], done=False)
    emit("response.created", response=opening)
    emit("response.in_progress", response=opening)
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            emit("response.content_part.added", part=part, **where)
            for piece in _words(text):
                emit("response.output_text.delta", delta=piece, logprobs=[], **where)
            emit("response.output_text.done", text=text, logprobs=[], **where)
            emit("response.content_part.done", part={**part, "text": text}, **where)
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            where = {"item_id": item["id"], "output_index": index}
            for piece in _slices(item["arguments"]):
                emit("response.function_call_arguments.delta", delta=piece, **where)
            emit("response.function_call_arguments.done", arguments=item["arguments"], **where)
        emit("response.output_item.done", output_index=index, item=item)
    final = _response_object(turn, response_id, created, items, done=True)
    emit(
        "response.incomplete" if final["status"] == "incomplete" else "response.completed",
        response=final,
    )
    return _stream_answer(events, headers)


# --- Anthropic messages -----------------------------------------------------------------


def _anthropic_blocks(turn: _Turn) -> list[dict[str, Any]]:
    reply = turn.reply
    blocks: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text})
    for call, call_id in zip(reply.tool_calls, turn.call_ids("toolu_"), strict=True):
        blocks.append(
            {"type": "tool_use", "id": call_id, "name": call.name, "input": call.arguments}
        )
    return blocks


def _anthropic_usage(turn: _Turn, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": turn.input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": turn.reply.cached_tokens,
        "service_tier": "standard",
    }


def _message(turn: _Turn, headers: dict[str, str]) -> _Answer:
    payload = {
        "id": turn.new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": _anthropic_blocks(turn),
        "stop_reason": turn.finish("anthropic"),
        "stop_sequence": None,
        "usage": _anthropic_usage(turn, turn.output_tokens),
    }
    return _json_answer(200, payload, headers)


def _message_stream(turn: _Turn, headers: dict[str, str]) -> _Answer:
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        # The SDK skips an event without an ``event:`` line, so it is never left out.
        events.append(_sse({"type": kind, **fields}, kind))

    start_usage = _anthropic_usage(turn, min(turn.output_tokens, 1))
    emit(
        "message_start",
        message={
            "id": turn.new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": turn.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        },
    )
    for index, block in enumerate(_anthropic_blocks(turn)):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in _words(block["text"]):
                emit(
                    "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
                )
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in _slices(json.dumps(block["input"])):
                delta = {"type": "input_json_delta", "partial_json": piece}
                emit("content_block_delta", index=index, delta=delta)
        emit("content_block_stop", index=index)
    emit(
        "message_delta",
        delta={"stop_reason": turn.finish("anthropic"), "stop_sequence": None},
        usage={
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": turn.reply.cached_tokens,
        },
    )
    emit("message_stop")
    return _stream_answer(events, headers)


# --- errors -----------------------------------------------------------------------------


def _error(
    provider: Provider,
    status: int,
    message: str,
    headers: dict[str, str],
    *,
    code: str | None = None,
    param: str | None = None,
) -> _Answer:
    if provider == "anthropic":
        kind = _ANTHROPIC_ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        payload: dict[str, Any] = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": headers.get("request-id"),
        }
    else:
        if status == 429:
            kind, code = "requests", code or "rate_limit_exceeded"
        elif status >= 500:
            kind = "server_error"
        else:
            kind = "invalid_request_error"
        payload = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return _json_answer(status, payload, headers)


def _fault_answer(
    fault: Fault, provider: Provider, body: dict[str, Any], headers: dict[str, str]
) -> _Answer:
    headers = dict(headers)
    if fault.retry_after_s is not None:
        seconds = fault.retry_after_s
        headers["retry-after"] = str(int(seconds)) if seconds == int(seconds) else f"{seconds:g}"
        if provider == "openai":
            headers["x-should-retry"] = "true"
    if fault.context_length:
        # Over the window by construction, whatever the request's own size.
        tokens = _CONTEXT_WINDOW + estimate_tokens(_message_text(body))
        if provider == "anthropic":
            message = f"prompt is too long: {tokens} tokens > {_CONTEXT_WINDOW} maximum"
            return _error(provider, 400, message, headers)
        message = (
            f"This model's maximum context length is {_CONTEXT_WINDOW} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
        )
        return _error(
            provider, 400, message, headers, code="context_length_exceeded", param="messages"
        )
    status = cast(int, fault.status)
    return _error(provider, status, _ERROR_MESSAGES.get(status, f"Error {status}."), headers)


_BUILDERS: dict[tuple[str, bool], Callable[[_Turn, dict[str, str]], _Answer]] = {
    ("chat", False): _chat_completion,
    ("chat", True): _chat_completion_stream,
    ("responses", False): _response,
    ("responses", True): _response_stream,
    ("messages", False): _message,
    ("messages", True): _message_stream,
}


# --- the server -------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Many short-lived servers in a test run: rebinding a just-freed port must not fail.
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ModelServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer (a timeout, a test done early) is not an error.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect
    # Small SSE writes must leave at once, not wait for an ACK (Nagle with delayed ACKs).
    disable_nagle_algorithm = True

    @property
    def owner(self) -> ModelServer:
        return cast(_HTTPServer, self.server).owner

    def setup(self) -> None:
        super().setup()
        self.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.owner._closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test run's output is no place for an access log

    def do_GET(self) -> None:
        self._write(_error("openai", 404, f"No endpoint GET {self.path}.", {}))

    def do_POST(self) -> None:
        raw = self._read_body()
        route = _ROUTES.get(urlsplit(self.path).path.rstrip("/"))
        if route is None:
            message = (
                f"No endpoint POST {self.path}: point OpenAI at ModelServer.openai_base_url "
                "(…/v1) and Anthropic at ModelServer.anthropic_base_url."
            )
            self._write(_error("openai", 404, message, {}))
            return
        provider, api = route
        headers = {name.lower(): value for name, value in self.headers.items()}
        request_id = self.owner._new_id("req_")
        reply_headers = {"x-request-id" if provider == "openai" else "request-id": request_id}
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._write(_error(provider, 400, "The body is not a JSON object.", reply_headers))
            return
        stream = bool(body.get("stream"))
        request = Request(provider, self.path, body, headers, stream, time.time())
        wait = self.owner._over_rate()
        if wait is not None:
            # The provider's own request rate limit, as the stand-in enforces it: a 429
            # with the seconds until the window has room again.
            self.owner._logged(replace(request, refused=True))
            count, window = cast(tuple[int, float], self.owner.limit_requests)
            message = f"Rate limit reached for requests (the limit is {count} per {window:g}s)."
            retry = {**reply_headers, "retry-after": f"{max(wait, 0.001):.3f}"}
            self._write(_error(provider, 429, message, retry))
            return
        if not self.owner._began():
            # The provider's own concurrency limit, as the stand-in enforces it: a 429.
            self.owner._logged(replace(request, refused=True))
            limit = self.owner.limit_in_flight
            message = f"Too many concurrent requests (the limit is {limit})."
            self._write(_error(provider, 429, message, reply_headers))
            return
        try:
            self._answer(provider, api, request, reply_headers)
        finally:
            self.owner._ended()

    def _answer(
        self, provider: Provider, api: str, request: Request, reply_headers: dict[str, str]
    ) -> None:
        body, stream = request.body, request.stream
        try:
            item = self.owner._admit(request)
        except _ResponderFailed as exc:
            self._write(_error(provider, 500, str(exc), reply_headers))
            return

        drop_after: int | None = None
        if isinstance(item, Fault):
            if item.hang:
                self.owner._stopping.wait()
                self.close_connection = True
                return
            if item.drop_after_chunks is None:
                self._write(_fault_answer(item, provider, body, reply_headers))
                return
            drop_after = item.drop_after_chunks
            reply = Reply(text=_CUT_OFF_TEXT)
        else:
            reply = item
            if reply.delay_s and not self._hold(reply.delay_s):
                self.close_connection = True
                return
        turn = _Turn.of(reply, body, self.owner._new_id)
        answer = _BUILDERS[api, stream](turn, reply_headers)
        self._write(answer, chunk_delay_s=reply.chunk_delay_s, drop_after=drop_after)

    def _hold(self, seconds: float) -> bool:
        """Wait ``seconds`` before answering; False if the server is stopping or the
        client went away meanwhile (a provider stops working on a request whose client
        hung up: it no longer counts against its limit)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.owner._stopping.wait(min(left, 0.05)):
                return False
            if self._client_gone():
                return False
        return True

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _write(
        self, answer: _Answer, *, chunk_delay_s: float = 0.0, drop_after: int | None = None
    ) -> None:
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.events is None:
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            if drop_after is None:
                self.wfile.write(answer.body)
            else:
                self.wfile.write(answer.body[: len(answer.body) // 2])
                self.close_connection = True
            return
        # Chunked, not close-delimited: only then is a connection dropped mid-stream an
        # error the client can see, rather than what looks like the end of the body.
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for number, event in enumerate(answer.events):
            if drop_after is not None and number >= drop_after:
                # Closed without the final empty chunk: the client's read fails.
                self.close_connection = True
                return
            if number and chunk_delay_s and self.owner._stopping.wait(chunk_delay_s):
                self.close_connection = True
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")


class ModelServer:
    """A local stand-in for the OpenAI and Anthropic APIs; see the module's docstring."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        responder: Responder | None = None,
        limit_in_flight: int | None = None,
        limit_requests: tuple[int, float] | None = None,
    ) -> None:
        self._host = host
        self._port = port
        # Asked for each request the script leaves unanswered; may be swapped at any time.
        self.responder = responder
        # The provider's concurrency limit: a request beyond it is answered 429 (and
        # counted in ``over_limit``), as a real provider's would be.
        self.limit_in_flight = limit_in_flight
        # The provider's request rate limit, (count, window seconds): a request past
        # ``count`` answered within the last ``window`` is answered 429 with Retry-After
        # (and counted in ``over_rate``).
        self.limit_requests = limit_requests
        self._answered_at: deque[float] = deque()
        self._refused_rate = 0
        self._in_flight = 0
        self._peak_in_flight = 0
        self._over_limit = 0
        self._lock = threading.Lock()
        self._queue: deque[Reply | Fault] = deque()
        self._log: list[Request] = []
        self._defaults = 0
        self._serial = itertools.count(1)
        self._stopping = threading.Event()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---

    def start(self) -> ModelServer:
        with self._lock:
            if self._httpd is not None:
                return self
            self._stopping = threading.Event()
            self._httpd = _HTTPServer((self._host, self._port), self)
            # A short poll: stop() waits on it, once for every server a test suite starts.
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.01},
                name=f"model-server:{self._httpd.server_address[1]}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            httpd, thread = self._httpd, self._thread
            self._httpd = self._thread = None
            if httpd is None:
                return
            # Releases the handlers holding a hung request, a delay, or a paced stream.
            self._stopping.set()
            connections = dict(self._connections)
        httpd.shutdown()
        httpd.server_close()
        # Idle keep-alive connections hold a handler thread each, blocked on a read.
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for handler in connections.values():
            handler.join(timeout=2)
        if thread is not None:
            thread.join(timeout=2)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        httpd = self._httpd
        if httpd is None:
            raise RuntimeError("the model server is not running: start() it first")
        host, port = httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # --- scripting and inspection ---

    def script(self, *replies: Reply | Fault) -> None:
        """Queue replies and faults for the next requests, in order, whichever provider
        they are for."""
        for reply in replies:
            if not isinstance(reply, Reply | Fault):
                raise TypeError(f"script() takes Reply and Fault, not {type(reply).__name__}")
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        """Forget the queue and the requests received; default replies count from 0 again."""
        with self._lock:
            self._queue.clear()
            self._log.clear()
            self._defaults = 0
            self._peak_in_flight = self._in_flight
            self._over_limit = 0
            self._refused_rate = 0
            self._answered_at.clear()

    @property
    def requests(self) -> list[Request]:
        """The requests received, in arrival order, faulted ones included."""
        with self._lock:
            return list(self._log)

    def count(self, provider: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self._log if provider is None or r.provider == provider)

    # --- for the handlers ---

    def _began(self) -> bool:
        """A request is being answered: False (and nothing counted) past the limit."""
        with self._lock:
            if self.limit_in_flight is not None and self._in_flight >= self.limit_in_flight:
                self._over_limit += 1
                return False
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
            return True

    def _over_rate(self) -> float | None:
        """None: within ``limit_requests`` (and counted); else the seconds until the
        window has room."""
        with self._lock:
            if self.limit_requests is None:
                return None
            count, window = self.limit_requests
            now = time.monotonic()
            while self._answered_at and self._answered_at[0] <= now - window:
                self._answered_at.popleft()
            if len(self._answered_at) >= count:
                self._refused_rate += 1
                return self._answered_at[-count] + window - now
            self._answered_at.append(now)
            return None

    @property
    def over_rate(self) -> int:
        """Requests refused (429) for being past ``limit_requests``."""
        with self._lock:
            return self._refused_rate

    def peak_in_window(self, seconds: float, *, refused: bool = True) -> int:
        """The most requests that arrived within any ``seconds`` (a sliding window over
        the log; ``refused=False``: only those it answered with a reply, not a 429)."""
        with self._lock:
            times = sorted(r.at for r in self._log if refused or not r.refused)
        most, first = 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= seconds:
                first += 1
            most = max(most, last - first + 1)
        return most

    def _ended(self) -> None:
        with self._lock:
            self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        """How many requests it is answering now."""
        with self._lock:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most requests it was answering at once."""
        with self._lock:
            return self._peak_in_flight

    @property
    def over_limit(self) -> int:
        """Requests refused (429) for being past ``limit_in_flight``."""
        with self._lock:
            return self._over_limit

    def _logged(self, request: Request) -> None:
        with self._lock:
            self._log.append(request)

    def _admit(self, request: Request) -> Reply | Fault:
        with self._lock:
            self._log.append(request)
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        if responder is not None:
            # Outside the lock: a responder may take its time, and other requests must not
            # wait for it.
            item = _respond(responder, request)
            if item is not None:
                return item
        with self._lock:
            number = self._defaults
            self._defaults += 1
        return Reply(text=f"reply {number}")

    def _new_id(self, prefix: str) -> str:
        # Numbered rather than random, so that a test run reads the same every time.
        with self._lock:
            return f"{prefix}{next(self._serial):06d}"

    def _opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections[connection] = threading.current_thread()

    def _closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.pop(connection, None)


def _respond(responder: Responder, request: Request) -> Reply | Fault | None:
    name = getattr(responder, "__qualname__", repr(responder))
    try:
        item = responder(request)
    except Exception as exc:
        # The client only sees a 500; whoever runs the server sees where the responder broke.
        traceback.print_exc(file=sys.stderr)
        raise _ResponderFailed(f"The responder {name} raised {exc!r}.") from exc
    if item is not None and not isinstance(item, Reply | Fault):
        raise _ResponderFailed(
            f"The responder {name} answered {type(item).__name__}, not a Reply, Fault or None."
        )
    return item


def _load_responder(spec: str) -> Responder:
    """The function ``module:function`` names (imported from ``sys.path``)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"a responder is named module:function, not {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec} is not callable")
    return cast(Responder, target)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cairn.testing.model_server",
        description="Serve a stand-in for the OpenAI and Anthropic APIs until interrupted.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--responder",
        metavar="MODULE:FUNCTION",
        help="answer requests with this function of a Request (returning a Reply, a Fault, "
        "or None for the default reply)",
    )
    args = parser.parse_args(argv)
    if __spec__ is not None and __name__ == "__main__":
        # Run with -m, this module is __main__; a responder importing Reply by the module's
        # own name must get these very classes, not those of a second copy.
        sys.modules.setdefault(__spec__.name, sys.modules[__name__])
    try:
        responder = _load_responder(args.responder) if args.responder else None
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        parser.error(f"--responder: {exc}")
    server = ModelServer(args.host, args.port, responder=responder).start()
    print(f"model server listening on {server.url}", flush=True)
    print(f"  OpenAI(base_url={server.openai_base_url!r}, api_key='test')", flush=True)
    print(f"  Anthropic(base_url={server.anthropic_base_url!r}, api_key='test')", flush=True)
    if args.responder:
        print(
            f"{args.responder} answers requests (None: a default reply); Ctrl-C stops", flush=True
        )
    else:
        print(
            "every request gets a default reply: 'reply 0', 'reply 1', ...; Ctrl-C stops",
            flush=True,
        )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
