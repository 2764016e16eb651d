"""The Anthropic messages wire format, whole or streamed."""

from __future__ import annotations

import json
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

# --- Anthropic messages -----------------------------------------------------------------


def _anthropic_blocks(turn: Turn) -> list[dict[str, Any]]:
    reply = turn.reply
    blocks: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text})
    for call, call_id in zip(reply.tool_calls, turn.call_ids("toolu_"), strict=True):
        blocks.append(
            {"type": "tool_use", "id": call_id, "name": call.name, "input": call.arguments}
        )
    return blocks


def _anthropic_usage(turn: Turn, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": turn.input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": turn.reply.cached_tokens,
        "service_tier": "standard",
    }


def message(turn: Turn, headers: dict[str, str]) -> Answer:
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
    return json_answer(200, payload, headers)


def message_stream(turn: Turn, headers: dict[str, str]) -> Answer:
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        # The SDK skips an event without an ``event:`` line, so it is never left out.
        events.append(sse({"type": kind, **fields}, kind))

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
            for piece in words(block["text"]):
                emit(
                    "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
                )
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in slices(json.dumps(block["input"])):
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
    return stream_answer(events, headers)
