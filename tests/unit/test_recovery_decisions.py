"""Recovery that needs a person (held nodes and the operator's decisions) and re-planning
after a resume, in the decider."""

from __future__ import annotations

from typing import Any

import pytest

from cairn import Workflow
from cairn.decider.graph import decide
from cairn.decider.step import OPERATOR
from cairn.definitions.transitions import transition_table
from cairn.errors import (
    EventRejected,
    NotWaiting,
    UnknownSignal,
    WorkflowDefinitionError,
)
from cairn.model.commands import Dispatch, HoldExecution, SettleExecution
from cairn.model.definition import ErrorClass
from cairn.model.events import NodeHeld, Phase, PlanInvalidated, RollbackRequested
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.testing.driver import Driver
from tests.unit import handlers

NOOP = handlers.noop


def payment(**options: Any) -> Workflow:
    wf = (
        Workflow("payment", **options)
        .task("quote", NOOP, next="charge")
        .task("charge", NOOP, next="receipt", irreversible=True, on_error={"permanent": "refund"})
        .task("receipt", NOOP, next="done")
        .task("refund", NOOP, next="failed")
        .end("done")
        .end("failed", "failed")
    )
    if "on_resume" in options:  # reachable only by re-planning
        wf.task("replan", NOOP, next="charge", max_visits=3)
    return wf


def held_at_charge(**options: Any) -> Driver:
    driver = Driver(payment(**options).build())
    driver.start()
    driver.succeed("quote")
    command = driver.take("charge")
    decision = driver.apply(
        NodeHeld(
            at=driver.tick(),
            node="charge",
            iteration=command.iteration,
            attempt=command.attempt,
            reason="irreversible: its worker died running it",
            recoveries=1,
        )
    )
    assert HoldExecution("charge", 1, 1, Phase.RUN) in decision.commands
    return driver


def test_a_held_node_parks_the_run_waiting_for_an_operator() -> None:
    driver = held_at_charge()
    charge = driver.state.nodes["charge"]
    assert charge.status is NodeStatus.HELD
    assert charge.error is not None and "irreversible" in charge.error
    assert not charge.active and driver.state.active_nodes == []
    assert driver.state.status is RunStatus.WAITING
    assert [(node.node, phase) for node, phase in driver.state.held] == [("charge", Phase.RUN)]
    assert ("charge", "held", OPERATOR) in driver.path
    assert driver.dispatched == []


def test_retry_dispatches_a_new_attempt_marked_resumed() -> None:
    driver = held_at_charge()
    decision = driver.signal("recovery.retry", actor="alice")
    assert decision.commands[0] == Dispatch("charge", 1, 2, resumed=True)
    assert driver.state.status is RunStatus.RUNNING
    assert driver.state.nodes["charge"].status is NodeStatus.SCHEDULED
    assert driver.state.nodes["charge"].error is None
    driver.succeed("charge")
    driver.succeed("receipt")
    assert driver.state.status is RunStatus.SUCCEEDED


def test_complete_settles_the_node_with_the_output_the_operator_vouches_for() -> None:
    driver = held_at_charge()
    decision = driver.signal("recovery.complete", payload={"output": {"charge_id": "ch_1"}})
    assert (
        SettleExecution("charge", 1, Phase.RUN, NodeStatus.SUCCEEDED, result={"charge_id": "ch_1"})
        in decision.commands
    )
    assert driver.state.nodes["charge"].status is NodeStatus.SUCCEEDED
    assert driver.state.vars["charge_id"] == "ch_1"
    assert driver.outstanding == ["receipt"]  # the run goes on along the success edge
    assert (OPERATOR, "recovery.complete", "charge") in driver.path


def test_fail_takes_the_nodes_permanent_error_edge() -> None:
    driver = held_at_charge()
    decision = driver.signal("recovery.fail", payload={"reason": "the bank says no charge"})
    settle = next(c for c in decision.commands if isinstance(c, SettleExecution))
    assert settle.status is NodeStatus.FAILED and settle.error == "the bank says no charge"
    assert driver.state.nodes["charge"].error_class == ErrorClass.PERMANENT.value
    assert driver.outstanding == ["refund"]
    assert ("charge", "failed:permanent", "refund") in driver.path


def test_the_same_decision_id_twice_is_applied_once_and_a_second_decision_refused() -> None:
    driver = held_at_charge()
    driver.signal("recovery.retry", signal_id="op-1")
    assert driver.signal("recovery.retry", signal_id="op-1").ignored is not None
    with pytest.raises(NotWaiting):
        driver.signal("recovery.complete", signal_id="op-2")


@pytest.mark.parametrize(
    ("name", "kwargs", "error"),
    [
        ("recovery.restart", {}, UnknownSignal),
        ("recovery.retry", {"wait": "quote"}, NotWaiting),
        ("recovery.complete", {"payload": {"output": [1, 2]}}, EventRejected),
    ],
)
def test_bad_decisions_are_refused_and_change_nothing(
    name: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    driver = held_at_charge()
    before = driver.state
    with pytest.raises(error):
        driver.signal(name, **kwargs)
    assert driver.state is before
    assert before.nodes["charge"].status is NodeStatus.HELD


def test_a_recovery_decision_for_a_run_with_nothing_held_is_refused() -> None:
    driver = Driver(payment().build())
    driver.start()
    with pytest.raises(NotWaiting):
        driver.signal("recovery.retry")


def test_cancel_while_held_ends_the_run_and_settles_the_execution_cancelled() -> None:
    driver = held_at_charge()
    decision = driver.cancel()
    assert driver.state.status is RunStatus.CANCELLED
    assert driver.state.nodes["charge"].status is NodeStatus.CANCELLED
    assert any(
        isinstance(c, SettleExecution) and c.status is NodeStatus.CANCELLED
        for c in decision.commands
    )


def test_a_hold_while_cancelling_is_ignored_the_node_stops_on_its_own() -> None:
    driver = Driver(payment().build())
    driver.start()
    driver.succeed("quote")
    driver.cancel()
    held = decide(
        driver.definition,
        driver.state,
        NodeHeld(at=driver.tick(), node="charge", reason="irreversible"),
    )
    assert held.ignored is not None


def test_a_hold_for_a_stale_attempt_is_ignored() -> None:
    driver = held_at_charge()
    driver.signal("recovery.retry")
    stale = decide(
        driver.definition, driver.state, NodeHeld(at=driver.tick(), node="charge", attempt=1)
    )
    assert stale.ignored is not None and "stale" in stale.ignored


def test_a_held_compensation_is_decided_the_same_way() -> None:
    wf = (
        Workflow("saga")
        .task("pay", NOOP, next="ship", compensate=handlers.undo, irreversible=True)
        .task("ship", NOOP, next="done")
        .end("done")
    )
    driver = Driver(wf.build())
    driver.start()
    driver.succeed("pay")
    driver.fail("ship")
    command = driver.take("pay")
    assert command.phase is Phase.COMPENSATE
    driver.apply(
        NodeHeld(at=driver.tick(), node="pay", phase=Phase.COMPENSATE, reason="irreversible")
    )
    assert driver.state.status is RunStatus.COMPENSATING
    assert [(n.node, p) for n, p in driver.state.held] == [("pay", Phase.COMPENSATE)]
    driver.signal("recovery.retry")
    assert driver.dispatched == [Dispatch("pay", 1, 2, Phase.COMPENSATE, resumed=True)]
    driver.run("pay")
    assert driver.state.status is RunStatus.COMPENSATED


def test_two_held_branches_need_the_decision_to_name_its_node() -> None:
    wf = (
        Workflow("fan")
        .parallel("both", ["left", "right"], next="done")
        .task("left", NOOP, irreversible=True)
        .task("right", NOOP, irreversible=True)
        .end("done")
    )
    driver = Driver(wf.build())
    driver.start()
    for node in ("left", "right"):
        driver.take(node)
        driver.apply(NodeHeld(at=driver.tick(), node=node, reason="irreversible"))
    with pytest.raises(EventRejected, match="several nodes are held"):
        driver.signal("recovery.complete")
    driver.signal("recovery.complete", wait="left")
    assert driver.state.status is RunStatus.WAITING  # right is still held
    driver.signal("recovery.complete", wait="right")
    assert driver.state.status is RunStatus.SUCCEEDED


# -- on_resume ----------------------------------------------------------------------------


def test_an_invalid_plan_on_resume_sends_the_run_to_its_replan_node() -> None:
    driver = Driver(payment(on_resume={"check": handlers.by_flag, "replan": "replan"}).build())
    driver.start()
    driver.succeed("quote")
    command = driver.take("charge")
    driver.apply(
        PlanInvalidated(
            at=driver.tick(),
            node="charge",
            iteration=command.iteration,
            attempt=command.attempt,
            reason="the quote expired",
        )
    )
    charge = driver.state.nodes["charge"]
    assert charge.status is NodeStatus.CANCELLED and "quote expired" in (charge.error or "")
    assert ("charge", "replan", "replan") in driver.path
    driver.succeed("replan")
    assert driver.outstanding == ["charge"]
    assert driver.state.nodes["charge"].iteration == 2


def test_plan_invalidated_needs_an_on_resume_declaration() -> None:
    driver = Driver(payment().build())
    driver.start()
    with pytest.raises(EventRejected, match="no on_resume"):
        driver.apply(PlanInvalidated(at=driver.tick(), node="quote", reason="x"))


# -- definitions ----------------------------------------------------------------------------


def test_on_resume_and_irreversible_appear_in_the_transition_table() -> None:
    definition = payment(on_resume={"check": handlers.by_flag, "replan": "replan"}).build()
    rows = {(r.source, r.event, r.target) for r in transition_table(definition)}
    assert ("*", "replan", "replan") in rows
    assert ("charge", "held", OPERATOR) in rows


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"on_resume": {"check": handlers.by_flag, "replan": "nowhere"}}, "unknown_target"),
        ({"on_resume": {"check": handlers.by_flag}}, "bad_value"),
        ({"on_resume": "tests.unit.handlers:by_flag"}, "bad_value"),
    ],
)
def test_bad_on_resume_declarations_are_refused(options: dict[str, Any], code: str) -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        payment(**options).build()
    assert code in {fault.code for fault in caught.value.faults}


def test_irreversible_must_be_a_boolean_on_a_node_with_a_handler() -> None:
    wf = Workflow("w").task("a", NOOP, next="done", irreversible="yes").end("done")
    with pytest.raises(WorkflowDefinitionError, match="irreversible"):
        wf.build()
    decision = {"guard": "tests.unit.handlers:by_flag", "cases": {"true": "done", "false": "done"}}
    wf = Workflow("w").task("a", branch=decision, irreversible=True).end("done")
    with pytest.raises(WorkflowDefinitionError, match="irreversible"):
        wf.build()


def test_wait_signals_may_not_use_the_recovery_prefix() -> None:
    wf = (
        Workflow("w")
        .wait("ask", signals={"recovery.retry": "done"}, timeout="1h", on_timeout="done")
        .end("done")
    )
    with pytest.raises(WorkflowDefinitionError) as caught:
        wf.build()
    assert "reserved_name" in {fault.code for fault in caught.value.faults}


def test_a_hold_of_a_finished_execution_is_ignored() -> None:
    driver = Driver(payment().build())
    driver.start()
    driver.succeed("quote")
    driver.succeed("charge")
    late = decide(driver.definition, driver.state, NodeHeld(at=driver.tick(), node="charge"))
    assert late.ignored is not None and "duplicate" in late.ignored
    assert driver.state.nodes["charge"].status is NodeStatus.SUCCEEDED


def test_an_irreversible_node_that_times_out_is_held_not_failed() -> None:
    """A payment still running at its timeout may yet go through: a person decides,
    as when its worker is lost — it is neither retried nor failed (so no compensation
    and no error edge run while the charge may be on its way)."""
    driver = Driver(payment().build())
    driver.start()
    driver.succeed("quote")
    driver.take("charge")
    decision = driver.fire("node_timeout:charge")
    assert driver.state.status is RunStatus.WAITING
    charge = driver.state.nodes["charge"]
    assert charge.status is NodeStatus.HELD
    assert "irreversible: timed out after 1h" in (charge.error or "")
    kinds = {type(command).__name__ for command in decision.commands}
    assert {"CancelNode", "HoldExecution"} <= kinds
    assert "Dispatch" not in kinds and "refund" not in driver.state.nodes
    assert not [t for t in driver.timers if t.startswith("node_timeout:charge")]


# -- on_resume after a long gap -------------------------------------------------------------


def approval_then_charge(after: str | None) -> Driver:
    on_resume: dict[str, Any] = {"check": handlers.by_flag, "replan": "replan"}
    if after is not None:
        on_resume["after"] = after
    definition = (
        Workflow("approve_then_charge", on_resume=on_resume)
        .task("quote", NOOP, next="approve")
        .wait("approve", signals={"approved": "charge"}, timeout="30d", on_timeout="failed")
        .task(
            "charge",
            NOOP,
            next="done",
            retry={"attempts": 3, "backoff": "2h", "max_delay": "4h", "jitter": "none"},
        )
        .task("replan", NOOP, next="approve", max_visits=3)
        .end("done")
        .end("failed", "failed")
        .build()
    )
    driver = Driver(definition)
    driver.start()
    return driver


def _dispatch_of(driver: Driver, node: str) -> Dispatch:
    command = driver.take(node)
    driver.dispatched.insert(0, command)  # leave it outstanding
    return command


@pytest.mark.parametrize(("waited_h", "checked"), [(3, True), (0.5, False)])
def test_a_run_woken_from_a_long_wait_checks_its_plan_before_the_next_node(
    waited_h: float, checked: bool
) -> None:
    driver = approval_then_charge(after="1h")
    assert not _dispatch_of(driver, "quote").resumed  # the first node: no gap to speak of
    driver.succeed("quote")
    driver.tick(waited_h * 3600)  # a person takes their time
    driver.signal("approved")
    assert _dispatch_of(driver, "charge").resumed is checked


def test_a_long_retry_backoff_checks_the_plan_before_the_retry() -> None:
    driver = approval_then_charge(after="1h")
    driver.succeed("quote")
    driver.signal("approved")
    assert not _dispatch_of(driver, "charge").resumed
    driver.fail("charge", ErrorClass.TRANSIENT)
    driver.fire("retry:charge")  # two hours later
    assert _dispatch_of(driver, "charge").resumed


def test_without_after_only_an_interruption_checks_the_plan() -> None:
    driver = approval_then_charge(after=None)
    driver.succeed("quote")
    driver.tick(30 * 24 * 3600 - 10)
    driver.signal("approved")
    assert not _dispatch_of(driver, "charge").resumed


@pytest.mark.parametrize(("hours_since_checkpoint", "checked"), [(3, True), (0.01, False)])
def test_a_rollback_to_an_old_checkpoint_checks_the_plan_of_what_runs_again(
    hours_since_checkpoint: float, checked: bool
) -> None:
    definition = (
        Workflow(
            "charge_then_confirm",
            on_resume={"check": handlers.by_flag, "replan": "replan", "after": "1h"},
        )
        .task("quote", NOOP, next="charge")
        .task("charge", NOOP, next="confirm")
        .wait("confirm", signals={"confirmed": "done"}, timeout="30d", on_timeout="done")
        .task("replan", NOOP, next="charge", max_visits=3)
        .end("done")
        .build()
    )
    driver = Driver(definition)
    driver.start()
    driver.succeed("quote")
    at_checkpoint = driver.state  # charge in progress here
    driver.tick(hours_since_checkpoint * 3600)
    driver.succeed("charge")
    assert driver.state.status is RunStatus.WAITING
    driver.apply(
        RollbackRequested(
            at=driver.tick(), reason="wrong card", to_seq=2, rewind=at_checkpoint.to_dict()
        )
    )
    again = driver.take("charge")
    assert again.iteration == 2 and again.resumed is checked
