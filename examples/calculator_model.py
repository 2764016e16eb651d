"""A stand-in "model" for ``examples/agent_loop.yaml``: a responder for the model server.

Serve it with::

    python -m cairn.testing.model_server --port 8765 --responder examples.calculator_model:respond

and point the ``openai`` SDK at it (``OPENAI_BASE_URL=http://127.0.0.1:8765/v1``,
``OPENAI_API_KEY=test``). It plays a model that can do arithmetic only with a tool: it
reads the chat messages of each request — the user's question, ``"2 + 3 * 4 - 5"``,
evaluated left to right, and the ``calculate`` results the conversation holds so far — and
either asks for the next ``calculate`` call or answers ``"The answer is N."``. A question
that is not such a sum gets a refusal and no tool call; so does a request that does not
offer the ``calculate`` tool, since a model never calls a tool it was not given.

It is deterministic: the same conversation gets the same reply (tool call ids included),
so a node that runs again is answered as it was the first time. Token counts are the
model server's estimates.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from cairn.testing.model_server import Reply, Request, ToolCall

if TYPE_CHECKING:
    from cairn import Message

TOOL = "calculate"
OPERATORS = ("+", "-", "*")
ANSWER = "The answer is {}."
REFUSAL = "I can only answer sums like 2 + 3 * 4 - 5, worked out left to right."
NO_TOOL = "I need the calculate tool to work this out, and none was offered."

_NUMBER = re.compile(r"-?\d+")


def respond(request: Request) -> Reply | None:
    """The reply to one request; None (the server's default reply) for a request that is
    not a chat completion, the only API this model speaks."""
    if request.path.rstrip("/") != "/v1/chat/completions":
        return None
    messages: list[Message] = list(request.body.get("messages") or [])
    steps = parse(_question(messages))
    if steps is None:
        return Reply(text=REFUSAL)
    first, operations = steps
    results = _results(messages)
    if len(results) > len(operations):
        return Reply(text=REFUSAL)  # more answers than it asked for: not its conversation
    if results and not _NUMBER.fullmatch(results[-1].strip()):
        return Reply(text=f"The calculator answered {results[-1]!r}; I cannot go on.")
    value = int(results[-1]) if results else first
    if len(results) == len(operations):
        return Reply(text=ANSWER.format(value))
    if TOOL not in _offered(request.body):
        return Reply(text=NO_TOOL)
    op, right = operations[len(results)]
    call = ToolCall(TOOL, {"left": value, "op": op, "right": right}, id=f"call_{len(results)}")
    return Reply(tool_calls=(call,))


def parse(question: str) -> tuple[int, list[tuple[str, int]]] | None:
    """``"2 + 3 * 4"`` as ``(2, [("+", 3), ("*", 4)])``; None if it is not such a sum."""
    tokens = question.split()
    if len(tokens) % 2 == 0:
        return None
    numbers, operators = tokens[::2], tokens[1::2]
    if not all(_NUMBER.fullmatch(n) for n in numbers) or any(o not in OPERATORS for o in operators):
        return None
    values = [int(n) for n in numbers]
    return values[0], list(zip(operators, values[1:], strict=True))


def _question(messages: list[Message]) -> str:
    """The last thing the user said, as text (a string, or a list of text parts)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(
                    str(part.get("text", "")) for part in content if isinstance(part, dict)
                )
            return str(content or "")
    return ""


def _results(messages: list[Message]) -> list[str]:
    """What the tool answered to this model's ``calculate`` calls since the question, in
    order; a tool message that answers some other call is not one of them."""
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    asked: set[str] = set()
    results: list[str] = []
    for message in messages[start + 1 :]:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                if call.get("function", {}).get("name") == TOOL:
                    asked.add(str(call.get("id")))
        elif message.get("role") == "tool" and message.get("tool_call_id") in asked:
            content = message.get("content")
            results.append(content if isinstance(content, str) else json.dumps(content))
    return results


def _offered(body: Message) -> set[str]:
    """The names of the function tools the request offers."""
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("type") == "function":
            names.add(str(tool.get("function", {}).get("name")))
    return names
