"""State keys that accumulate (reducers): declared in any form, applied by the decider to
what a step returns, a misfit refused — at validation for a definition, as a permanent
step failure at run time — and the state at any seq folded from the steps' deltas."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cairn.decider import decide
from cairn.definitions.builder import Workflow
from cairn.definitions.loader import load_definition
from cairn.errors import WorkflowDefinitionError
from cairn.model.deltas import delta, fold
from cairn.model.events import NodeSucceeded, RunStarted
from cairn.model.reducers import Reducer, ReducerMismatch, reduced
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.testing.driver import Driver

ACCUMULATING = {"notes": "append", "cost": "add", "facts": "merge"}


def note(ctx: object, state: dict[str, object]) -> dict[str, object]:
    return {"notes": ["one"], "cost": 1.5, "facts": {"seen": True}}


def looping(max_visits: int = 2000) -> Workflow:
    return (
        Workflow("notes_loop", version=1, reducers=ACCUMULATING)
        .task(
            "think",
            note,
            route={"key": "more", "table": {"yes": "think"}, "default": "done"},
            max_visits=max_visits,
        )
        .end("done")
    )


# -- the reducers themselves ---------------------------------------------------------


def test_each_reducer_joins_the_output_with_what_the_state_holds() -> None:
    reducers = {key: Reducer(name) for key, name in ACCUMULATING.items()}
    held = {"notes": ["a"], "cost": 1, "facts": {"x": 1, "y": 2}, "plain": [1]}
    out = reduced(
        reducers, held, {"notes": ["b", "c"], "cost": 2.5, "facts": {"y": 3}, "plain": [2]}
    )
    assert out == {"notes": ["a", "b", "c"], "cost": 3.5, "facts": {"x": 1, "y": 3}, "plain": [2]}
    assert held == {"notes": ["a"], "cost": 1, "facts": {"x": 1, "y": 2}, "plain": [1]}
    fresh = reduced(reducers, {}, {"notes": ["a"], "cost": 2, "facts": {"x": 1}})
    assert fresh == {"notes": ["a"], "cost": 2, "facts": {"x": 1}}


@pytest.mark.parametrize(
    ("held", "output", "words"),
    [
        ({}, {"notes": "one"}, "returns a list to append, not a string"),
        ({}, {"cost": True}, "returns a number to add, not a boolean"),
        ({}, {"facts": [1]}, "returns an object to merge, not a list"),
        ({"notes": 5}, {"notes": ["x"]}, "the state holds a number there, not a list"),
        ({"cost": "1"}, {"cost": 1}, "the state holds a string there, not a number"),
    ],
)
def test_a_value_of_the_wrong_kind_is_a_reducer_mismatch(
    held: dict[str, object], output: dict[str, object], words: str
) -> None:
    reducers = {key: Reducer(name) for key, name in ACCUMULATING.items()}
    with pytest.raises(ReducerMismatch, match=words) as caught:
        reduced(reducers, held, output)
    assert caught.value.code == "reducer_mismatch"


# -- declared in the three forms, checked at validation -----------------------------------


def test_yaml_and_builder_declare_the_same_reducers() -> None:
    spec = {
        "name": "notes_loop",
        "version": 1,
        "reducers": ACCUMULATING,
        "start": "think",
        "nodes": {
            "think": {
                "handler": f"{__name__}:note",
                "route": {"key": "more", "table": {"yes": "think"}, "default": "done"},
                "max_visits": 2000,
            },
            "done": {"end": "succeeded"},
        },
    }
    from_file, built = load_definition(spec), looping().build()
    assert from_file == built
    assert built.reducers == {"notes": Reducer.APPEND, "cost": Reducer.ADD, "facts": Reducer.MERGE}
    assert built != replace(built, reducers={})  # the equality is not vacuous


def test_an_unknown_reducer_and_a_misfit_default_are_faults() -> None:
    wf = (
        Workflow("bad", version=1, reducers={"notes": "concat", "tally": "add", "": "add"})
        .parallel("fan", ["a"], next="done")
        .task("a", note, default={"tally": "many"})
        .end("done")
    )
    with pytest.raises(WorkflowDefinitionError) as caught:
        wf.build()
    faults = caught.value.faults
    assert [f.code for f in faults] == ["bad_reducer"] * 3
    messages = " / ".join(f.message for f in faults)
    assert "'concat'; a reducer is one of append, add, merge" in messages
    assert "'' is not a state key" in messages
    assert "accumulates by add: a default adds a number" in messages
    assert faults[2].node == "a"


def test_a_format_1_definition_may_not_declare_reducers() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        Workflow("old", version=1, format=1, reducers={"n": "add"}).task(
            "a", note, next="done"
        ).end("done").build()
    assert "newer_key" in caught.value.codes


# -- applied by the decider ---------------------------------------------------------------


def test_a_loop_appends_each_visits_output_and_its_events_hold_only_that() -> None:
    driver = Driver(looping().build())
    driver.start(more="yes")
    for _ in range(299):
        driver.succeed("think", {"notes": ["x" * 200], "cost": 1})
    driver.state.vars["more"] = "no"  # the last visit leaves the loop
    driver.succeed("think", {"notes": ["last"], "cost": 1})
    assert driver.state.status is RunStatus.SUCCEEDED
    assert driver.state.vars["notes"] == ["x" * 200] * 299 + ["last"]
    assert driver.state.vars["cost"] == 300


def test_append_to_a_number_fails_the_step_permanently_with_its_code() -> None:
    driver = Driver(looping().build())
    driver.start(more="yes", notes=5)
    driver.succeed("think", {"notes": ["x"]})
    assert driver.state.status is RunStatus.FAILED
    think = driver.state.nodes["think"]
    assert think.status is NodeStatus.FAILED and think.error_class == "permanent"
    assert think.error is not None and think.error.startswith("reducer_mismatch: ")
    assert driver.state.vars["notes"] == 5  # nothing of the output was merged


def test_parallel_branches_append_to_one_key_in_declared_order() -> None:
    wf = (
        Workflow("gather", version=1, reducers={"found": "append", "hits": "add"})
        .parallel("fan", ["a", "b", "c"], next="done")
        .task("a", note, default={"found": ["a-default"]})
        .task("b", note)
        .task("c", note)
        .end("done")
    )
    driver = Driver(wf.build())
    driver.start(found=["start"])
    driver.succeed("c", {"found": ["c"], "hits": 1})
    driver.succeed("b", {"found": ["b"], "hits": 2})
    driver.succeed("a", {"found": ["a"], "hits": 3})
    assert driver.state.vars == {"found": ["start", "a", "b", "c"], "hits": 6}


# -- the state at any seq, folded from the deltas -------------------------------------------


def test_the_state_at_any_seq_is_folded_from_the_deltas() -> None:
    """The decider folding the log from a snapshot gives what it gave live: a state
    rebuilt from the snapshot at seq 100 and the events after it equals the live one."""
    definition = looping().build()
    state = RunState("r", definition.name, definition.version)
    events = [RunStarted(at=1.0, input={"more": "yes"})]
    live: list[RunState] = []
    for visit in range(1, 301):
        state = decide(definition, state, events[-1]).state
        live.append(state)
        events.append(
            NodeSucceeded(at=1.0 + visit, node="think", iteration=visit, output={"notes": [visit]})
        )
    snapshot = json.loads(json.dumps(live[99].to_dict()))  # as a snapshot is stored
    rebuilt = RunState.from_dict(snapshot)
    for event in events[100:250]:
        rebuilt = decide(definition, rebuilt, event).state
    assert rebuilt.vars == live[249].vars
    assert rebuilt.vars["notes"] == list(range(1, 250))
    assert live[9].vars["notes"] == list(range(1, 10))
    assert all(len(json.dumps(dict(event.output or {}))) < 20 for event in events[1:])


# -- what changed between two checkpoints -------------------------------------------------


def test_a_delta_holds_the_appended_items_and_the_changed_fields_and_folds_back() -> None:
    before = {"messages": [{"n": 0}], "turns": 1, "scratch": {"a": 1}, "gone": True}
    after = {"messages": [{"n": 0}, {"n": 1}], "turns": 2, "scratch": {"a": 1}, "new": 1}
    change = delta(before, after)
    assert change == {"append": {"messages": [{"n": 1}]}, "set": {"turns": 2, "new": 1},
                      "drop": ["gone"]}  # fmt: skip
    assert fold(before, change) == after
    rewritten = {**after, "messages": [{"n": "compacted"}]}  # not an extension: set whole
    assert delta(after, rewritten) == {"set": {"messages": [{"n": "compacted"}]}}
    assert fold(after, delta(after, rewritten)) == rewritten
    assert delta(after, after) == {}
    assert delta({"flag": 1}, {"flag": True}) == {"set": {"flag": True}}
