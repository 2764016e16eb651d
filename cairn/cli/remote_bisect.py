"""``cairn bisect`` over HTTP: the same binary search as
:func:`cairn.timetravel.bisection.bisect_steps`, its predicate run here on the states the
API restores (``GET /v1/runs/{id}/state?at=``), the steps read from the run's history.
The answer has ``Bisection.to_dict()``'s shape, so it prints as direct mode's does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cairn.cli.views import step_of
from cairn.timetravel.bisection import BadPredicate, Check, Verdict, first_failing

if TYPE_CHECKING:
    from cairn.cli.views import step_of
    from cairn.http import Client
from cairn.timetravel.bisection import Predicate


def bisect_over_http(
    client: Client,
    run_id: str,
    predicate: Predicate,
    on_check: Callable[[Check], None] | None = None,
) -> dict[str, Any]:
    """The first step after which ``predicate`` fails, as ``Bisection.to_dict()``."""
    steps = client.history(run_id).steps
    checks: list[Check] = []

    def state_at(seq: int) -> dict[str, Any]:
        return client.state(run_id, seq).state

    def holds_at(seq: int, label: str) -> bool:
        state = state_at(seq)
        try:
            good = bool(predicate(state))
        except Exception as exc:  # the user's predicate: say where it broke
            raise BadPredicate(
                f"the predicate raised {type(exc).__name__} on the state at seq {seq}: {exc}"
            ) from exc
        checks.append(Check(seq, label, good))
        if on_check is not None:
            on_check(checks[-1])
        return good

    def answer(verdict: Verdict, **found: Any) -> dict[str, Any]:
        shown = {"step": None, "input": None, "output": None, "changes": []} | found
        return {"run_id": run_id, "verdict": verdict.value, "checks": _listed(checks), **shown}

    if not steps:
        return answer(Verdict.NO_STEPS)
    first = first_failing(
        len(steps), lambda index: holds_at(steps[index]["seq"], step_of(steps[index]).label)
    )
    if first == len(steps):
        return answer(Verdict.NEVER_FAILS)
    seq = steps[first]["seq"]
    if first == 0 and not holds_at(seq - 1, "start"):
        return answer(Verdict.FAILS_AT_START)
    (event,) = client.events(run_id, after=seq - 1, limit=1).events
    return answer(
        Verdict.FOUND,
        step=steps[first],
        input=state_at(seq - 1),
        output=event["data"].get("output"),
        changes=client.diff(run_id, seq - 1, seq).changes,
    )


def _listed(checks: list[Check]) -> list[dict[str, Any]]:
    return [check.to_dict() for check in checks]
