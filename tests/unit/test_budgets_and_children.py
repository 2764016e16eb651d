"""Cost budgets (``ctx.charge``, split across branches) and child workflow runs: the
decider's rules, the definition's checks, the step context, and what status shows. Both
end to end on the embedded runtime: tests/embedded/test_budgets_and_children.py."""

from __future__ import annotations

from typing import Any

import pytest

from cairn import BudgetExceeded, Workflow
from cairn.decider.budget import allowance
from cairn.decider.children import MAX_DEPTH, child_run_id
from cairn.model.commands import NotifyParent, StartChild
from cairn.model.definition import ErrorClass
from cairn.model.events import (
    ChildFinished,
    NodeFailed,
    NodeSucceeded,
    RunStarted,
    event_from_dict,
)
from cairn.model.state import BranchOutcome, RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.observe.explain import context_lines
from cairn.testing.driver import Driver
from cairn.workers.context import StepContext
from tests.unit.test_loader import faults_of, pairs

NOOP = "tests.unit.handlers:noop"


def research(**fan: Any) -> Workflow:
    wf = Workflow("research", version=1, budget={"tokens": 1000})
    wf.parallel("fan", ["a", "b", "c"], join={"policy": "quorum", "k": 2}, next="write", **fan)
    for branch in "abc":
        wf.task(branch, NOOP)
    wf.task("write", NOOP, next="done")
    return wf.end("done")


def charged(driver: Driver, node: str, tokens: float, *, failed: bool = False) -> None:
    command = driver.take(node)
    common: dict[str, Any] = {
        "at": driver.tick(),
        "node": node,
        "iteration": command.iteration,
        "attempt": command.attempt,
        "charges": {"tokens": tokens},
    }
    driver.apply(NodeFailed(**common, message="over") if failed else NodeSucceeded(**common))


# -- budgets: the rules -----------------------------------------------------------------


def test_the_fan_out_splits_what_the_run_has_left_by_shares() -> None:
    driver = Driver(research(budget={"tokens": 600}, shares={"a": 2}).build())
    driver.start()
    allowances = driver.state.joins["fan"].allowances
    assert allowances == {
        "a": {"tokens": 300.0},
        "b": {"tokens": 150.0},
        "c": {"tokens": 150.0},
    }
    assert allowance(driver.definition, driver.state, "a") == {"tokens": 300.0}


def test_without_its_own_budget_the_fan_out_shares_everything_left() -> None:
    driver = Driver(research().build())
    driver.start()
    assert driver.state.joins["fan"].allowances["c"] == {"tokens": 1000.0 / 3}


def test_charges_count_for_the_visit_and_the_run_failures_included() -> None:
    driver = Driver(research(budget={"tokens": 600}).build())
    driver.start()
    charged(driver, "a", 250.0, failed=True)  # over its 200: failed, but it was spent
    assert driver.state.nodes["a"].spent == {"tokens": 250.0}
    assert driver.state.spent == {"tokens": 250.0}
    assert allowance(driver.definition, driver.state, "b") == {"tokens": 200.0}
    charged(driver, "b", 120.0)
    charged(driver, "c", 100.0)
    assert driver.state.joins["fan"].outcomes["a"] is BranchOutcome.FAILED
    # The writer gets what the run has left: 1000 - 470.
    assert allowance(driver.definition, driver.state, "write") == {"tokens": 530.0}


def test_a_duplicate_result_never_charges_twice() -> None:
    driver = Driver(research().build())
    driver.start()
    command = driver.take("a")
    event = NodeSucceeded(
        at=driver.tick(), node="a", iteration=1, attempt=command.attempt, charges={"tokens": 10}
    )
    driver.apply(event)
    assert driver.apply(event).ignored
    assert driver.state.spent == {"tokens": 10.0}


def test_a_node_budget_counts_across_its_attempts() -> None:
    wf = Workflow("capped", version=1)
    wf.task("call", NOOP, next="done", budget={"tokens": 100}, retry={"attempts": 3})
    driver = Driver(wf.end("done").build())
    driver.start()
    command = driver.take("call")
    driver.apply(
        NodeFailed(
            at=driver.tick(),
            node="call",
            iteration=1,
            attempt=command.attempt,
            error_class=ErrorClass.TRANSIENT,
            charges={"tokens": 70},
        )
    )
    driver.fire("retry:call")
    assert allowance(driver.definition, driver.state, "call") == {"tokens": 30.0}


def test_ctx_charge_stops_an_execution_past_its_allowance() -> None:
    state = RunState("r", "w", 1)
    ctx = StepContext(
        run_id="r",
        workflow="w",
        node="web",
        iteration=1,
        attempt=1,
        phase="run",
        state=state,
        allowance={"tokens": 250},
    )
    ctx.charge(tokens=100, usd=0.5)  # usd is not limited here
    assert ctx.remaining("tokens") == 150 and ctx.remaining("usd") is None
    with pytest.raises(BudgetExceeded, match="spent 300 of 250 tokens"):
        ctx.charge(tokens=200)
    assert ctx.charges == {"tokens": 300.0, "usd": 0.5}  # the charge that went over counts
    with pytest.raises(TypeError):
        ctx.charge(tokens="many")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite and >= 0"):
        ctx.charge(tokens=-1)


def test_budget_fields_are_checked_when_the_definition_loads() -> None:
    spec = research(budget={"tokens": -5}, shares={"z": 1}).to_spec()
    spec["budget"] = {"tokens": "lots"}
    assert pairs(faults_of(spec)) == {
        ("bad_value", None),
        ("bad_value", "fan"),
        ("join_unknown_branch", "fan"),
    }


# -- child runs: the rules --------------------------------------------------------------


def trip(**child: Any) -> Workflow:
    wf = Workflow("trip", version=1, budget={"tokens": 100})
    wf.parallel("fan", ["flights", "hotel"], next="done")
    wf.task("flights", child={"workflow": "search", "input": ["city"], **child})
    wf.task("hotel", NOOP)
    return wf.end("done")


def test_a_child_node_starts_a_child_run_named_by_its_execution() -> None:
    driver = Driver(trip().build())
    decision = driver.start(city="Oslo", secret="x")
    (start,) = [c for c in decision.commands if isinstance(c, StartChild)]
    assert start.run_id == child_run_id(driver.run_id, "flights", 1, 1)
    assert start.correlation_id == f"{driver.run_id}/flights#1.1"
    assert start.input == {"city": "Oslo"}  # only the fields it names
    assert start.budget == {"tokens": 50.0} and start.depth == 1
    assert driver.outstanding == ["hotel"]  # no worker message for the child node
    assert driver.state.nodes["flights"].child == start.run_id


def test_the_childs_end_finishes_the_node_and_a_stale_one_is_ignored() -> None:
    driver = Driver(trip(output=["found"]).build())
    driver.start(city="Oslo")
    child = driver.state.nodes["flights"].child
    assert child is not None
    finished = ChildFinished(
        at=driver.tick(),
        node="flights",
        iteration=1,
        attempt=1,
        child_run_id="someone-else",
        status="succeeded",
    )
    assert driver.apply(finished).ignored
    driver.apply(
        ChildFinished(
            at=driver.tick(),
            node="flights",
            iteration=1,
            attempt=1,
            child_run_id=child,
            correlation_id=f"{driver.run_id}/flights#1.1",
            status="succeeded",
            output={"found": "LH 1", "internal": True},
            charges={"tokens": 40},
        )
    )
    driver.run("hotel")
    assert driver.state.status is RunStatus.SUCCEEDED
    assert driver.state.vars["found"] == "LH 1" and "internal" not in driver.state.vars
    assert driver.state.spent == {"tokens": 40.0}


def test_a_failed_child_fails_its_node() -> None:
    driver = Driver(trip().build())
    driver.start()
    child = driver.state.nodes["flights"].child
    assert child is not None
    driver.apply(
        ChildFinished(
            at=driver.tick(),
            node="flights",
            iteration=1,
            attempt=1,
            child_run_id=child,
            status="failed",
            reason="no flights",
        )
    )
    flights = driver.state.nodes["flights"]
    assert flights.status is NodeStatus.FAILED and "no flights" in (flights.error or "")
    assert driver.state.status is RunStatus.FAILED  # policy all


def test_a_child_run_tells_its_parent_when_it_ends() -> None:
    wf = Workflow("search", version=1)
    wf.task("look", NOOP, next="done")
    driver = Driver(wf.end("done").build())
    parent = {
        "run_id": "p",
        "node": "flights",
        "iteration": 2,
        "attempt": 1,
        "correlation_id": "p/flights#2.1",
        "depth": 1,
    }
    driver.apply(RunStarted(at=driver.tick(), input={"city": "Oslo"}, parent=parent))
    command = driver.take("look")
    decision = driver.apply(
        NodeSucceeded(at=driver.tick(), node="look", attempt=command.attempt, charges={"tokens": 3})
    )
    (notify,) = [c for c in decision.commands if isinstance(c, NotifyParent)]
    assert notify.run_id == "p"
    event = event_from_dict(notify.event)
    assert isinstance(event, ChildFinished)
    assert (event.node, event.iteration, event.status) == ("flights", 2, "succeeded")
    assert event.correlation_id == "p/flights#2.1" and event.charges == {"tokens": 3.0}


def test_children_nest_only_so_deep() -> None:
    driver = Driver(trip().build())
    parent = {"run_id": "p", "node": "x", "iteration": 1, "attempt": 1, "depth": MAX_DEPTH}
    decision = driver.apply(RunStarted(at=driver.tick(), input={}, parent=parent))
    assert not [c for c in decision.commands if isinstance(c, StartChild)]
    assert "nest" in (driver.state.nodes["flights"].error or "")
    assert driver.state.status is RunStatus.FAILED


def test_child_fields_are_checked_when_the_definition_loads() -> None:
    spec = trip().to_spec()
    spec["nodes"]["flights"]["child"] = {"workflow": "search", "input": "city", "extra": 1}
    spec["nodes"]["hotel"]["child"] = "search"  # and a handler: which one?
    assert pairs(faults_of(spec)) == {
        ("bad_value", "flights"),  # input is a list of fields
        ("unknown_key", "flights"),  # extra
        ("ambiguous_node", "hotel"),
    }


def test_status_shows_spending_and_the_parent_link() -> None:
    driver = Driver(research().build())
    driver.start()
    charged(driver, "a", 120.5)
    assert context_lines(driver.definition, driver.state) == ["spent: 120.5 of 1000 tokens"]
    driver.state.parent = {"run_id": "p", "node": "f", "iteration": 1, "correlation_id": "p/f#1.1"}
    driver.state.budget = {"tokens": 300.0, "usd": 1.0}
    assert context_lines(driver.definition, driver.state) == [
        "spent: 120.5 of 300 tokens, 0 of 1 usd",
        "child of run p (node f#1, correlation p/f#1.1)",
    ]
