"""The shipped examples run, through the decider, with their real handlers; the
calculator model and its tool. The agent examples on the embedded runtime:
tests/embedded/test_examples.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cairn.definitions.catalog import discover
from cairn.model.definition import WorkflowDefinition
from cairn.model.statuses import RunStatus
from cairn.testing.driver import Driver
from cairn.testing.model_server import Reply, Request, ToolCall
from examples import agent, calculator_model
from tests.support.in_process import EXAMPLES


def weekly_report() -> WorkflowDefinition:
    (found,) = discover([str(EXAMPLES / "weekly_report.py")])
    assert found.definition is not None, found.error
    return found.definition


def test_weekly_report_fans_out_to_three_sub_reports_and_publishes() -> None:
    driver = Driver(weekly_report())
    driver.start(week="2026-W47")
    driver.run("collect")
    assert sorted(driver.outstanding) == ["sales", "tickets", "traffic"]
    state = driver.run_to_end()
    assert state.status is RunStatus.SUCCEEDED
    assert "Sales: 6945 EUR over 5 days" in state.vars["report"]
    assert state.vars["published"] == "reports/2026-W47.txt"


def test_weekly_report_revises_a_report_without_data_a_bounded_number_of_times() -> None:
    driver = Driver(weekly_report())
    driver.start(week="2027-W01")
    state = driver.run_to_end()
    assert state.status is RunStatus.SUCCEEDED
    assert state.visits["compose"] == 3
    assert state.vars["revision"] == 3


# --- agent_loop: the calculator "model" and the example's handlers. On the embedded runtime:
# tests/embedded/test_examples.py; on real services (PostgreSQL, Redis, Celery workers):
# tests/acceptance/test_agent_example.py


def _ask(body: dict[str, Any]) -> Reply | None:
    return calculator_model.respond(
        Request("openai", "/v1/chat/completions", body, {}, stream=False, at=0.0)
    )


def _converse(question: str) -> tuple[list[Reply], list[dict[str, Any]]]:
    """The calculator model's replies to a conversation the way ``think`` and ``act``
    build it: each tool call answered by the example's own calculator."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": agent.SYSTEM},
        {"role": "user", "content": question},
    ]
    replies: list[Reply] = []
    for _turn in range(20):
        reply = _ask({"model": "m", "messages": messages, "tools": [agent.CALCULATE]})
        assert reply is not None
        replies.append(reply)
        if not reply.tool_calls:
            return replies, messages
        calls: list[dict[str, Any]] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in reply.tool_calls
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call in calls:
            result = agent._run_tool(call["function"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise AssertionError(f"no answer to {question!r} in 20 turns")


@pytest.mark.parametrize(
    ("question", "answer", "tool_turns"),
    [
        ("2 + 3", 5, 1),
        ("2 + 3 * 4 - 5", 15, 3),
        ("2 + 3 * 4", 20, 2),
        ("7", 7, 0),
        ("-2 * -3", 6, 1),
    ],
)
def test_the_calculator_model_asks_for_one_calculation_a_turn_then_answers(
    question: str, answer: int, tool_turns: int
) -> None:
    replies, messages = _converse(question)
    assert [len(r.tool_calls) for r in replies] == [1] * tool_turns + [0]
    assert replies[-1].text == f"The answer is {answer}."
    # Left to right, each call on the result of the one before.
    tokens = question.split()
    asked = [r.tool_calls[0].arguments for r in replies[:-1]]
    assert [(a["op"], a["right"]) for a in asked] == [
        (op, int(right)) for op, right in zip(tokens[1::2], tokens[2::2], strict=True)
    ]
    assert [str(a["left"]) for a in asked[1:]] == [m["content"] for m in messages[3::2][:-1]]
    # Usage is left to the model server's estimates.
    assert all(r.input_tokens is None and r.output_tokens is None for r in replies)


@pytest.mark.parametrize("question", ["what is love", "2 +", "2 / 3", "two + 3", "+ 2 3", ""])
def test_the_calculator_model_refuses_nonsense_without_a_tool_call(question: str) -> None:
    replies, _ = _converse(question)
    assert [(r.text, r.tool_calls) for r in replies] == [(calculator_model.REFUSAL, ())]


def test_the_calculator_model_calls_no_tool_it_was_not_offered() -> None:
    messages = [{"role": "user", "content": "2 + 3"}]
    elsewhere = {"type": "function", "function": {"name": "search", "parameters": {}}}
    for body in ({"messages": messages}, {"messages": messages, "tools": [elsewhere]}):
        reply = _ask(body)
        assert reply is not None and reply.tool_calls == ()
        assert reply.text == calculator_model.NO_TOOL
    assert _ask({"messages": [{"role": "user", "content": "7"}]}) == Reply(text="The answer is 7.")


def test_the_calculator_model_is_deterministic_and_reads_the_tools_answers() -> None:
    body = {"messages": [{"role": "user", "content": "2 * 3"}], "tools": [agent.CALCULATE]}
    first, again = _ask(body), _ask(body)
    assert first == again and first is not None  # the same call id too: call_0
    (call,) = first.tool_calls
    said = {"role": "assistant", "content": None, "tool_calls": [_wire(call)]}
    wrong = {**body, "messages": [*body["messages"], said, _tool(call.id, "error: no")]}
    reply = _ask(wrong)
    assert reply is not None and reply.tool_calls == () and "cannot go on" in reply.text
    # A tool answer for a call it never made does not count as the calculation's.
    other = {**body, "messages": [*body["messages"], said, _tool("call_elsewhere", "6")]}
    assert _ask(other) == first
    # Another API than chat completions: the model server's default reply.
    responses = Request("openai", "/v1/responses", {"input": "2 * 3"}, {}, stream=False, at=0.0)
    assert calculator_model.respond(responses) is None


def _wire(call: ToolCall) -> dict[str, Any]:
    arguments = json.dumps(call.arguments)
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _tool(call_id: str | None, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_the_calculator_tool_answers_errors_to_the_model() -> None:
    def run(name: str, arguments: str) -> str:
        return agent._run_tool({"name": name, "arguments": arguments})

    assert run("calculate", '{"left": 6, "op": "*", "right": -7}') == "-42"
    assert run("calculate", '{"left": 6, "op": "/", "right": 2}').startswith("error:")
    assert run("calculate", '{"left": "six", "op": "+", "right": 2}').startswith("error:")
    assert run("calculate", "not json").startswith("error:")
    assert run("search", "{}") == "error: there is no tool 'search'"
