"""Context that fits: what a node's context budget compacts before a call is sent —
pinned messages and the recent tail kept, a tool's result never cut from its call — and
the budget declared and checked in a definition. Compacting through the ``summarize``
handler with the real OpenAI SDK against the stand-in, the whole conversation in the
record: tests/embedded/test_model_context.py."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from cairn.definitions.loader import load_definition
from cairn.errors import WorkflowDefinitionError
from cairn.model.definition import ContextPolicy, Ref, TaskNode
from cairn.recording.compaction import split_for_compaction
from cairn.workers.context import StepContext

SYSTEM = {"role": "system", "content": "You are terse."}
TASK = {"role": "user", "content": "Plan the migration; keep the open tasks in mind."}


def summarize(ctx: StepContext, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A summarizer that asks the model, through ctx.model (a recorded call of its own)."""
    model = ctx.model(OpenAI(base_url=ctx.state["model_url"], api_key="t"))
    reply = model.chat.completions.create(
        model="summarizer",
        messages=[{"role": "user", "content": f"Summarize: {messages}"}],
    )
    return [{"role": "user", "content": f"[summary] {reply.choices[0].message.content}"}]


def pinned(message: dict[str, Any]) -> bool:
    return "PIN" in str(message.get("content"))


def test_the_tail_never_starts_with_a_tools_result_and_pins_are_kept() -> None:
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "42"}
    messages = [SYSTEM, TASK, {"role": "user", "content": "PIN the budget"}, call, result]
    split = split_for_compaction(messages, keep=1, pinned=pinned)
    assert split.tail == [call, result] and split.pinned == messages[:3] and split.older == []

    anthropic_call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]}
    anthropic_result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
    turns = [TASK, {"role": "assistant", "content": "a"}, anthropic_call, anthropic_result]
    split = split_for_compaction(turns, keep=1)
    assert split.tail == [anthropic_call, anthropic_result] and split.older == [1]

    items = [
        TASK,
        {"type": "message", "role": "assistant", "content": "b"},
        {"type": "function_call", "call_id": "f"},
        {"type": "function_call_output", "call_id": "f", "output": "7"},
    ]
    split = split_for_compaction(items, keep=1)
    assert split.tail == items[2:] and split.older == [1]


def _task(context: object) -> TaskNode:
    definition = load_definition(
        {
            "name": "w",
            "version": 1,
            "start": "a",
            "nodes": {
                "a": {"handler": f"{__name__}:pinned", "context": context, "next": "b"},
                "b": {"end": "succeeded"},
            },
        }
    )
    node = definition.nodes["a"]
    assert isinstance(node, TaskNode)
    return node


def test_a_context_budget_is_declared_and_checked_when_loaded() -> None:
    node = _task(
        {"max_tokens": 8000, "summarize": f"{__name__}:summarize", "pin": f"{__name__}:pinned"}
    )
    assert node.context == ContextPolicy(
        8000, Ref(f"{__name__}:summarize"), 4, Ref(f"{__name__}:pinned")
    )
    for bad, says in [
        ({"max_tokens": 8000}, "needs max_tokens and a summarize"),
        ({"max_tokens": 0, "summarize": f"{__name__}:summarize"}, "positive integer"),
        ({"max_tokens": 10, "summarize": f"{__name__}:summarize", "keep": -1}, "count of"),
        ({"max_tokens": 10, "sumarize": f"{__name__}:summarize"}, "did you mean 'summarize'"),
        ({"max_tokens": 10, "summarize": f"{__name__}:nowhere"}, "nowhere"),
        ("8000", "'context' is"),
    ]:
        with pytest.raises(WorkflowDefinitionError, match=says):
            _task(bad)
