"""The handlers, compensations and guards the golden definitions name.

The recorder runs them in-process (``handler(None, state)``, as the decider's test
driver does) to get each step's output; the replay imports them because a registered
definition is compiled with every reference resolved, and it calls the guards, which are
part of the decider's input. Their import paths are in the committed logs: renaming one
is a change to the logs' definitions (see README.md).
"""

from __future__ import annotations

from typing import Any

from cairn.model.migrations import MigratingRun, Migration


def step(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Counts the steps taken so far (``steps``)."""
    return {"steps": int(state.get("steps", 0)) + 1}


def quote(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"price": 120 * int(state.get("seats", 1))}


def undo(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A compensation: notes what it undid, last first (``undone``)."""
    return {"undone": [*state.get("undone", []), len(state.get("undone", []))]}


def think(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    rounds = int(state.get("rounds", 0)) + 1
    return {"rounds": rounds, "plan": f"plan {min(rounds, 3)}"}


def act(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    if int(state.get("rounds", 0)) >= int(state.get("answer_after", 8)):
        return {"answer": f"found after {state['rounds']} rounds"}
    return {}


def answered(state: dict[str, Any]) -> bool:
    """The agent loop's guard: round again until there is an answer."""
    return "answer" in state


def quote_still_valid(ctx: Any, state: dict[str, Any]) -> str | None:
    """The payout's ``on_resume`` check: a quote does not outlive an interruption."""
    return f"the quote of {state['price']} expired while the payment was in doubt"


def renamed(run: MigratingRun) -> Migration | None:
    """A migration's mapping: the review is the approval in version 2, and says so."""
    if run.node == "review":
        return Migration(node="approval", vars={**run.vars, "moved_from": run.from_version})
    return None
