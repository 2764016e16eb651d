"""Module-level handlers, compensations and guards for the decider property tests.

The decider never calls handlers or compensations (workers do); they only have to be
importable by name. Guards are called by the decider with a copy of the run state and
must be pure; each returns a label drawn from a small, known set, so the generated
definitions can list a case for every label a guard can return.
"""

from __future__ import annotations

from typing import Any

COLORS = ("red", "green", "blue")

# Every label each guard can return; the generator gives a branch one case per label.
GUARD_LABELS: dict[str, tuple[str, ...]] = {
    "flag_guard": ("true", "false"),
    "color_guard": COLORS,
    "parity_guard": ("0", "1"),
    "picky_guard": ("ok",),
}


def work(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A handler: never run by the decider, only named by the definitions."""
    return {}


def undo(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A compensation: never run by the decider either."""
    return {}


def flag_guard(state: dict[str, Any]) -> bool:
    return bool(state.get("flag"))


def color_guard(state: dict[str, Any]) -> str:
    color = state.get("color")
    return color if color in COLORS else "red"


def parity_guard(state: dict[str, Any]) -> int:
    n = state.get("n")
    return n % 2 if isinstance(n, int) and not isinstance(n, bool) else 0


def picky_guard(state: dict[str, Any]) -> str:
    """Raises when the state says so: exercises the decider's guard-failure path."""
    if state.get("boom") is True:
        raise ValueError("boom")
    return "ok"
