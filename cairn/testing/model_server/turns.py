"""One request being answered, in either provider's words: the token counts settled, the
finish reason translated, and the answer a handler writes back (JSON or a stream)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cairn.testing.model_server.values import Provider, Reply, estimate_tokens

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

# Message fields that are not text the model reads, left out of the input estimate.
_NOT_TEXT = frozenset({"role", "type", "id", "tool_call_id", "tool_use_id", "call_id"})


def message_text(body: dict[str, Any]) -> str:
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


def reply_text(reply: Reply) -> str:
    calls = "".join(call.name + json.dumps(call.arguments) for call in reply.tool_calls)
    return reply.text + calls


def words(text: str) -> list[str]:
    """``text`` in the pieces a stream sends it in: a word with the space after it."""
    pieces = re.findall(r"\s*\S+\s*", text)
    return pieces or ([text] if text else [])


def slices(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


@dataclass
class Answer:
    """What a handler writes back: a JSON body, or a stream of server-sent events."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    events: list[bytes] | None = None


@dataclass
class Turn:
    """One request being answered: its reply, with the token counts settled."""

    reply: Reply
    body: dict[str, Any]
    model: str
    input_tokens: int
    output_tokens: int
    new_id: Callable[[str], str]
    tool_ids: list[str]

    @classmethod
    def of(cls, reply: Reply, body: dict[str, Any], new_id: Callable[[str], str]) -> Turn:
        input_tokens = reply.input_tokens
        if input_tokens is None:
            input_tokens = estimate_tokens(message_text(body))
        output_tokens = reply.output_tokens
        if output_tokens is None:
            output_tokens = estimate_tokens(reply_text(reply))
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


def json_answer(status: int, payload: dict[str, Any], headers: dict[str, str]) -> Answer:
    return Answer(
        status, {"content-type": "application/json", **headers}, json.dumps(payload).encode()
    )


def stream_answer(events: list[bytes], headers: dict[str, str]) -> Answer:
    return Answer(
        200,
        {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            **headers,
        },
        events=events,
    )
