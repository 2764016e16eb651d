"""State keys that accumulate: how a node's output for such a key joins the value the run
already holds, instead of replacing it (LangGraph's reducers).

A workflow declares them (``reducers: {notes: append, cost: add, facts: merge}``). A
node then returns only what it adds — ``{"notes": ["one more"]}`` — and that is what its
event stores: the log grows by the step's own output, never by the accumulated value
again. The decider applies the reducer when it merges the output into the state, so
restoring, replaying and forking a run fold the same deltas into the same state.

Pure: no I/O, and the state given is never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from cairn.errors import CairnError


class Reducer(StrEnum):
    """How a key accumulates. ``append``: a list; the output's list is appended.
    ``add``: a number; the output's number is added. ``merge``: an object; the output's
    object is merged over it (its keys replace the same keys, the others stay)."""

    APPEND = "append"
    ADD = "add"
    MERGE = "merge"

    @property
    def holds(self) -> str:
        """What the key's value (and a step's output for it) must be, for messages."""
        return _HOLDS[self]


_HOLDS = {Reducer.APPEND: "a list", Reducer.ADD: "a number", Reducer.MERGE: "an object"}


class ReducerMismatch(CairnError):
    """A value that an accumulating key's reducer cannot take: a step returned, or the
    state holds, something of the wrong type for it (``append`` to a number). The step
    fails permanently with this as its reason; nothing of its output is merged."""

    code = "reducer_mismatch"


def fits(reducer: Reducer, value: object) -> bool:
    """Whether ``value`` is what ``reducer`` accumulates (a bool is no number)."""
    if reducer is Reducer.APPEND:
        return isinstance(value, list)
    if reducer is Reducer.ADD:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, Mapping)


def reduced(
    reducers: Mapping[str, Reducer], current: Mapping[str, Any], output: Mapping[str, Any]
) -> dict[str, Any]:
    """``current`` with ``output`` merged in: an accumulating key's value joined with the
    output's by its reducer, every other key replaced. A new dict; neither argument is
    changed, and a list or object that grew is a new one (the old state may be shared).
    :class:`ReducerMismatch` if a value does not fit its key's reducer."""
    merged = {**current, **output}
    if not reducers:
        return merged
    for key, reducer in reducers.items():
        if key not in output:
            continue
        added = output[key]
        if not fits(reducer, added):
            raise ReducerMismatch(
                f"state key {key!r} accumulates by {reducer.value}: a step returns "
                f"{reducer.holds} to {reducer.value}, not {_kind(added)}"
            )
        if key not in current:
            merged[key] = _fresh(reducer, added)
            continue
        held = current[key]
        if not fits(reducer, held):
            raise ReducerMismatch(
                f"state key {key!r} accumulates by {reducer.value}, but the state holds "
                f"{_kind(held)} there, not {reducer.holds}"
            )
        merged[key] = _join(reducer, held, added)
    return merged


def _fresh(reducer: Reducer, added: Any) -> Any:
    """The first value of a key the state does not hold yet: the output's, copied."""
    if reducer is Reducer.APPEND:
        return list(added)
    return dict(added) if reducer is Reducer.MERGE else added


def _join(reducer: Reducer, held: Any, added: Any) -> Any:
    if reducer is Reducer.APPEND:
        return [*held, *added]
    if reducer is Reducer.ADD:
        return held + added
    return {**held, **added}


def _kind(value: object) -> str:
    """A JSON value's kind, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


__all__ = ["Reducer", "ReducerMismatch", "fits", "reduced"]
