"""The first step after which a predicate on the run's state fails (``cairn bisect``):
a binary search over the steps, each check a state restored at one seq."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cairn.errors import InvalidInput
from cairn.model.definition import import_ref
from cairn.model.state import RunState
from cairn.store.records import EventRecord
from cairn.timetravel.diff import Change, diff_states, plain
from cairn.timetravel.steps import RUN_PHASE, Step, bare_step, result_of

Predicate = Callable[[dict[str, Any]], object]


class BadPredicate(InvalidInput):
    """A bisect predicate that cannot be imported or called, or raised while judging."""

    code = "bad_predicate"


def first_failing(count: int, holds: Callable[[int], bool]) -> int:
    """The first index in ``range(count)`` where ``holds`` is False, or ``count`` if it
    never is — assuming that once False it stays False. At most ceil(log2(count + 1))
    calls: ``count`` itself ("never") is one of the answers to tell apart."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            low = middle + 1
        else:
            high = middle
    return low


def load_predicate(path: str) -> Predicate:
    """``module:function``, imported; :class:`BadPredicate` if that fails."""
    try:
        predicate: Predicate = import_ref(path)
    except Exception as exc:  # whatever importing the user's module raised
        raise BadPredicate(
            f"cannot use {path!r} as a predicate: {type(exc).__name__}: {exc}"
        ) from exc
    return predicate


class Verdict(StrEnum):
    FOUND = "found"  # the step after which the predicate first fails
    FAILS_AT_START = "fails_at_start"  # before the first step already: no step is to blame
    NEVER_FAILS = "never_fails"  # it holds after the last step too
    NO_STEPS = "no_steps"  # nothing has executed yet


@dataclass(frozen=True)
class Check:
    seq: int
    label: str  # the step whose state-after was judged, or "start"
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "label": self.label, "ok": self.ok}


@dataclass(frozen=True)
class Bisection:
    run_id: str
    verdict: Verdict
    checks: tuple[Check, ...]
    step: Step | None = None
    input_state: RunState | None = None  # just before the step's event
    output_state: RunState | None = None  # just after it
    output: Mapping[str, Any] | None = None  # what the step's event carries

    @property
    def changes(self) -> list[Change]:
        if self.input_state is None or self.output_state is None:
            return []
        return diff_states(self.input_state, self.output_state)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "verdict": self.verdict.value,
            "checks": [check.to_dict() for check in self.checks],
            "step": self.step.to_dict() if self.step is not None else None,
            "input": plain(self.input_state) if self.input_state is not None else None,
            "output": dict(self.output) if self.output is not None else None,
            "changes": [change.to_dict() for change in self.changes],
        }


def bisect_steps(
    run_id: str,
    results: Sequence[Any],
    restore_at: Callable[[int], RunState],
    predicate: Predicate,
    on_check: Callable[[Check], None] | None = None,
) -> Bisection:
    """The first of ``results`` (a run's step events, in order) whose state-after fails
    ``predicate`` (called with the state as ``RunState.to_dict()`` data, a copy of its
    own; truthy means good), by binary search: it must hold at the start and, once
    failed, stay failed. ``restore_at(seq)`` is the run's state after event ``seq``. The
    state before the first step is checked only when the first step is the suspect, to
    tell "it broke there" from "it was never good"."""
    if not results:
        return Bisection(run_id, Verdict.NO_STEPS, ())
    checks: list[Check] = []

    def holds_at(seq: int, label: str) -> bool:
        state = restore_at(seq)
        try:
            good = bool(predicate(plain(state)))
        except Exception as exc:  # the user's predicate: say where it broke
            raise BadPredicate(
                f"the predicate raised {type(exc).__name__} on the state at seq {seq}: {exc}"
            ) from exc
        check = Check(seq, label, good)
        checks.append(check)
        if on_check is not None:
            on_check(check)
        return good

    first = first_failing(
        len(results), lambda index: holds_at(results[index].seq, _label(results[index]))
    )
    if first == len(results):
        return Bisection(run_id, Verdict.NEVER_FAILS, tuple(checks))
    found = results[first]
    if first == 0 and not holds_at(found.seq - 1, "start"):
        return Bisection(run_id, Verdict.FAILS_AT_START, tuple(checks))
    before = restore_at(found.seq - 1)
    after = restore_at(found.seq)
    result = result_of(found, before)
    assert result is not None  # it is a step, and the decider accepted it
    step = bare_step(found, result, before)
    return Bisection(run_id, Verdict.FOUND, tuple(checks), step, before, after, result.output)


def _label(event_row: EventRecord) -> str:
    data = event_row.data
    if event_row.type == "signal_received":
        return f"{data.get('name')} (operator)"
    undo = "" if data.get("phase", RUN_PHASE) == RUN_PHASE else f" ({data['phase']})"
    return f"{data.get('node')}#{data.get('iteration', 1)}/{data.get('attempt', 1)}{undo}"
