"""The run timeline on the embedded default (SQLite): digests, diffs of values, bisection
and its predicates, and an operator's decision about a held step as a step. History,
state at a seq, diff and bisect of runs the runtime's workers finished, compared with
what the live run wrote and its handlers were given, and the commands:
tests/embedded/test_timeline.py."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest

from cairn.config import Settings
from cairn.model.events import NodeHeld, stamped
from cairn.runtime import Runtime
from cairn.timetravel.bisection import BadPredicate, first_failing, load_predicate
from cairn.timetravel.diff import Change, diff_values
from cairn.timetravel.steps import digest
from cairn.timetravel.timeline import Timeline
from tests.integration import timeline_handlers

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO_ROOT / "tests" / "integration" / "workflows"
CHECK = "tests.integration.timeline_handlers:balance_ok"


# -- pure parts ---------------------------------------------------------------------------


def test_digests_are_canonical() -> None:
    assert digest({"a": 1, "b": [1, {"c": "é"}]}) == digest({"b": [1, {"c": "é"}], "a": 1})
    assert digest({"a": 1}) != digest({"a": 1.5})
    assert len(digest({})) == 64


def test_the_digest_is_importable_where_the_docs_name_it() -> None:
    from cairn.timetravel import timeline  # noqa: PLC0415

    assert timeline.digest is digest  # docs/time-travel.md: cairn.timetravel.timeline.digest


def test_diff_walks_dicts_and_lists_and_names_paths() -> None:
    old = {"vars": {"a": 1, "gone": True, "list": [1, 2], "x.y": 0}, "same": {"k": [1]}}
    new = {"vars": {"a": 2, "list": [1, 3, 4], "x.y": 1, "new": {"n": None}}, "same": {"k": [1]}}
    changes = {change.path: change for change in diff_values(old, new)}
    assert set(changes) == {
        "vars.a",
        "vars.gone",
        "vars.list[1]",
        "vars.list[2]",
        'vars["x.y"]',
        "vars.new",
    }
    assert changes["vars.a"].to_dict() == {
        "path": "vars.a",
        "change": "changed",
        "old": 1,
        "new": 2,
    }
    assert changes["vars.gone"].kind == "removed"
    assert changes["vars.list[2]"].to_dict() == {
        "path": "vars.list[2]",
        "change": "added",
        "new": 4,
    }
    assert changes["vars.new"].new == {"n": None}  # a None value is not an absent one


def test_diff_tells_json_types_apart() -> None:
    assert [c.path for c in diff_values({"a": 1}, {"a": 1.0})] == ["a"]
    assert [c.path for c in diff_values({"a": 1}, {"a": True})] == ["a"]
    assert diff_values({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) == []
    assert diff_values({}, {"a": 1}) == [Change("a", new=1)]


@pytest.mark.parametrize("count", [1, 2, 7, 63, 64, 100])
def test_first_failing_needs_at_most_ceil_log2_count_plus_one_checks(count: int) -> None:
    bound = math.ceil(math.log2(count + 1))
    for first_bad in range(count + 1):  # count: it never fails
        checked: list[int] = []

        def holds(index: int, first_bad: int = first_bad, checked: list[int] = checked) -> bool:
            checked.append(index)
            return index < first_bad

        assert first_failing(count, holds) == first_bad
        assert len(checked) <= bound, (first_bad, checked)
    assert math.ceil(math.log2(64 + 1)) == 7


def test_predicates_are_imported_or_refused_clearly() -> None:
    assert load_predicate(CHECK) is timeline_handlers.balance_ok
    for path, why in (
        ("no_colon_here", "not of the form"),
        ("tests.integration.timeline_handlers:nope", "AttributeError"),
        ("tests.no_such_module:ok", "ModuleNotFoundError"),
        ("tests.integration.timeline_handlers:os", "not callable"),
    ):
        with pytest.raises(BadPredicate, match=why):
            load_predicate(path)


# -- a held step settled by hand ----------------------------------------------------------


def test_an_operators_decision_about_a_held_step_is_a_step(tmp_path: Path) -> None:
    """A payment held for an operator (its worker was lost), then settled by hand: the
    settlement ends the execution, so it is a step, marked held and operator."""
    runtime = Runtime.build(Settings(home=tmp_path, workflows=[str(WORKFLOWS / "pay.yaml")]))
    try:
        run_id = runtime.orchestrator.submit("pay", {})
        held = NodeHeld(at=0.0, node="charge", reason="irreversible: its worker was lost")
        runtime.orchestrator.apply(run_id, partial(stamped, held))
        runtime.orchestrator.signal(
            run_id, "recovery.complete", {"output": {"charge_id": "ch_1"}}, actor="alice"
        )
        found = Timeline(runtime.orchestrator, run_id).history()
    finally:
        runtime.close()
    (settled,) = found.steps
    assert (settled.seq, settled.label, settled.status) == (3, "charge#1/1", "succeeded")
    assert settled.marks == ("operator", "held")
    assert settled.notes[0] == "recovery.complete by alice"
    assert settled.outputs_digest == digest({"charge_id": "ch_1"})
    assert [(e.seq, e.summary) for e in found.events] == [
        (1, "started"),
        (2, "charge#1 held: irreversible: its worker was lost"),
    ]
