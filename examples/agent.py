"""Handlers for ``examples/agent_loop.yaml``: a scripted planner stands in for the model.

The "model" reads the question ``"a op b op c ..."`` and plans one calculator call per
operator, left to right; the calculator tool does the arithmetic. The transcript in the
state is the ordered message history the loop builds up.
"""

from __future__ import annotations

import operator
from typing import Any

OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def think(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    tokens = str(state["question"]).split()
    done = int(state.get("steps_done", 0))
    transcript = list(state.get("transcript", []))
    malformed = len(tokens) % 2 == 0 or any(t not in OPERATORS for t in tokens[1::2])
    if malformed or not all(t.lstrip("-").isdigit() for t in tokens[::2]):
        transcript.append({"role": "assistant", "content": "I cannot parse this question."})
        return {"action": "give_up", "transcript": transcript}
    if 2 * done + 1 >= len(tokens):  # nothing (left) to calculate
        value = state["value"] if done else int(tokens[0])
        return {"action": "answer", "value": value, "transcript": transcript}
    left = state["value"] if done else int(tokens[0])
    op, right = tokens[2 * done + 1], int(tokens[2 * done + 2])
    transcript.append({"role": "assistant", "content": f"calculate({left} {op} {right})"})
    return {"action": "calculate", "call": [left, op, right], "transcript": transcript}


def act(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    left, op, right = state["call"]
    return {"tool_result": OPERATORS[op](left, right)}


def observe(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    transcript = [
        *state.get("transcript", []),
        {"role": "tool", "content": str(state["tool_result"])},
    ]
    steps = int(state.get("steps_done", 0)) + 1
    return {"value": state["tool_result"], "steps_done": steps, "transcript": transcript}


def has_answer(state: dict[str, Any]) -> bool:
    return 2 * int(state["steps_done"]) + 1 >= len(str(state["question"]).split())


def answer(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": f"The answer is {state['value']}."}
    return {"answer": state["value"], "transcript": [*state.get("transcript", []), message]}
