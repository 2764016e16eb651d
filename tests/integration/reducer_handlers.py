"""Handlers of ``workflows/noting_loop.yaml``: each visit adds one 200-byte note and one
to a tally, both state keys that accumulate."""

from __future__ import annotations

from cairn import State, StepContext


def note_text(visit: int) -> str:
    return f"{visit:05d}:".ljust(200, "x")


def note(ctx: StepContext, state: State) -> State:
    visit = int(state.get("visit", 0)) + 1
    return {"visit": visit, "notes": [note_text(visit)], "tally": 1}


def more(state: State) -> bool:
    return bool(state["visit"] < state["visits"])
