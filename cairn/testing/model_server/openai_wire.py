"""The OpenAI wire formats: chat completions and Responses, whole or streamed."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from cairn.testing.model_server.turns import (
    Answer,
    Turn,
    json_answer,
    slices,
    sse,
    stream_answer,
    words,
)

# --- OpenAI chat completions ------------------------------------------------------------


def _openai_usage(turn: Turn) -> dict[str, Any]:
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


def chat_completion(turn: Turn, headers: dict[str, str]) -> Answer:
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
    return json_answer(200, payload, headers)


def chat_completion_stream(turn: Turn, headers: dict[str, str]) -> Answer:
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
        return sse({**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in words(reply.text)]
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
            for piece in slices(json.dumps(call.arguments))
        ]
    events.append(chunk({}, turn.finish("openai")))
    if include_usage:
        events.append(sse({**base, "choices": [], "usage": _openai_usage(turn)}))
    events.append(b"data: [DONE]\n\n")
    return stream_answer(events, headers)


# --- OpenAI responses -------------------------------------------------------------------


def _responses_items(turn: Turn) -> list[dict[str, Any]]:
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
    turn: Turn, response_id: str, created: float, output: list[dict[str, Any]], done: bool
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


def response(turn: Turn, headers: dict[str, str]) -> Answer:
    payload = _response_object(
        turn, turn.new_id("resp_"), time.time(), _responses_items(turn), done=True
    )
    return json_answer(200, payload, headers)


def response_stream(turn: Turn, headers: dict[str, str]) -> Answer:
    response_id = turn.new_id("resp_")
    created = time.time()
    items = _responses_items(turn)
    sequence = itertools.count()
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(sse({"type": kind, "sequence_number": next(sequence), **fields}, kind))

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
            for piece in words(text):
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
            for piece in slices(item["arguments"]):
                emit("response.function_call_arguments.delta", delta=piece, **where)
            emit("response.function_call_arguments.done", arguments=item["arguments"], **where)
        emit("response.output_item.done", output_index=index, item=item)
    final = _response_object(turn, response_id, created, items, done=True)
    emit(
        "response.incomplete" if final["status"] == "incomplete" else "response.completed",
        response=final,
    )
    return stream_answer(events, headers)
