"""The decider on each structure and each event, step by step."""

from __future__ import annotations

from typing import Any

import pytest

from cairn import Workflow
from cairn.decider.graph import decide
from cairn.decider.step import retry_delay_s
from cairn.errors import (
    EventRejected,
    IllegalTransition,
    NotWaiting,
    UnknownNode,
    UnknownSignal,
)
from cairn.model.commands import (
    ArmTimer,
    CancelNode,
    DetachNode,
    Dispatch,
    FinishRun,
    HoldExecution,
)
from cairn.model.definition import ErrorClass, Jitter, RetryPolicy
from cairn.model.events import (
    NodeCancelled,
    NodeSucceeded,
    Phase,
    RunStarted,
    SignalReceived,
    TimerFired,
)
from cairn.model.state import BranchOutcome, RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.testing.driver import Driver
from tests.unit import handlers

NOOP = handlers.noop


def chain(*names: str, **node_options: Any) -> Workflow:
    wf = Workflow("chain", version=1)
    for current, following in zip(names, [*names[1:], "done"], strict=True):
        wf.task(current, NOOP, next=following, **node_options.get(current, {}))
    return wf.end("done")


# -- sequence ---------------------------------------------------------------------------


def test_sequence_dispatches_one_node_at_a_time_and_merges_outputs() -> None:
    driver = Driver(chain("a", "b", "c").build())
    first = driver.start(order=7)
    # With the default node timeout (1 h) armed as a durable timer.
    assert first.commands == (Dispatch("a", 1, 1), ArmTimer("node_timeout:a:1:1", driver.at + 3600))
    assert driver.state.status is RunStatus.RUNNING
    assert driver.state.nodes["a"].status is NodeStatus.SCHEDULED
    driver.succeed("a", {"x": 1})
    assert driver.outstanding == ["b"]
    driver.succeed("b", {"x": 2, "y": 3})
    last = driver.succeed("c")
    assert driver.state.status is RunStatus.SUCCEEDED
    assert driver.state.vars == {"order": 7, "x": 2, "y": 3}
    assert FinishRun(RunStatus.SUCCEEDED, None) in last.commands
    assert driver.path == [
        ("(start)", "started", "a"),
        ("a", "succeeded", "b"),
        ("b", "succeeded", "c"),
        ("c", "succeeded", "done"),
        ("done", "end", "(succeeded)"),
    ]


def test_decide_never_changes_the_state_it_is_given() -> None:
    definition = chain("a", "b").build()
    state = RunState("r", "chain", 1)
    before = state.to_dict()
    decision = decide(definition, state, RunStarted(at=1.0, input={"k": [1, 2]}))
    assert state.to_dict() == before
    after = decision.state.to_dict()
    decide(definition, decision.state, NodeSucceeded(at=2.0, node="a", output={"k": "changed"}))
    assert decision.state.to_dict() == after


def test_duplicate_and_stale_results_are_ignored_without_changes() -> None:
    driver = Driver(chain("a", "b").build())
    driver.start()
    driver.succeed("a", {"v": 1})
    state = driver.state
    duplicate = decide(driver.definition, state, NodeSucceeded(at=50.0, node="a", output={"v": 9}))
    assert duplicate.ignored is not None and "duplicate" in duplicate.ignored
    assert duplicate.state is state and duplicate.commands == ()
    stale = decide(
        driver.definition, state, NodeSucceeded(at=51.0, node="b", iteration=1, attempt=2)
    )
    assert stale.ignored is not None and "stale" in stale.ignored


def test_events_for_unknown_or_never_dispatched_nodes_are_refused() -> None:
    driver = Driver(chain("a", "b").build())
    driver.start()
    with pytest.raises(UnknownNode):
        decide(driver.definition, driver.state, NodeSucceeded(at=5.0, node="zzz"))
    with pytest.raises(IllegalTransition):
        decide(driver.definition, driver.state, NodeSucceeded(at=5.0, node="b"))


def test_starting_twice_is_an_illegal_transition() -> None:
    driver = Driver(chain("a").build())
    driver.start()
    with pytest.raises(IllegalTransition, match="already started"):
        driver.start()


# -- conditional edge -------------------------------------------------------------------


def branching() -> Workflow:
    return (
        Workflow("branching")
        .task(
            "check", NOOP, branch={"guard": handlers.by_flag, "cases": {True: "yes", False: "no"}}
        )
        .task("yes", NOOP, next="done")
        .task("no", NOOP, next="done")
        .end("done")
    )


@pytest.mark.parametrize(("flag", "taken"), [(True, "yes"), (False, "no")])
def test_branch_guard_sees_the_merged_output_and_picks_the_case(flag: bool, taken: str) -> None:
    driver = Driver(branching().build())
    driver.start()
    driver.succeed("check", {"flag": flag})
    assert driver.outstanding == [taken]
    assert ("check", f"case:{str(flag).lower()}", taken) in driver.path


def test_guard_that_raises_fails_the_node_as_permanent() -> None:
    wf = (
        Workflow("guarded")
        .task(
            "check",
            NOOP,
            branch={"guard": handlers.explode, "cases": {True: "done"}},
            on_error={"permanent": "fallback"},
        )
        .task("fallback", NOOP, next="done")
        .end("done")
    )
    driver = Driver(wf.build())
    driver.start()
    driver.succeed("check", {"ignored": True})
    assert driver.state.nodes["check"].status is NodeStatus.FAILED
    assert "guard blew up" in (driver.state.nodes["check"].error or "")
    assert "ignored" not in driver.state.vars  # a failed node's output is not merged
    assert driver.outstanding == ["fallback"]


def test_guard_returning_an_undeclared_label_fails_the_run() -> None:
    wf = (
        Workflow("colors")
        .task("pick", NOOP, branch={"guard": handlers.by_color, "cases": {"red": "done"}})
        .end("done")
    )
    driver = Driver(wf.build())
    driver.start()
    driver.succeed("pick", {"color": "blue"})
    assert driver.state.status is RunStatus.FAILED
    assert "'blue'" in (driver.state.reason or "")


def test_a_node_without_handler_decides_at_once() -> None:
    wf = (
        Workflow("router", start="decide")
        .task("decide", branch={"guard": handlers.by_flag, "cases": {True: "yes", False: "no"}})
        .task("yes", NOOP, next="done")
        .task("no", NOOP, next="done")
        .end("done")
    )
    driver = Driver(wf.build())
    decision = driver.start(flag=True)
    # The decision itself gets no default timeout: only the handler it leads to does.
    assert decision.commands == (
        Dispatch("yes", 1, 1),
        ArmTimer("node_timeout:yes:1:1", driver.at + 3600),
    )
    assert driver.state.nodes["decide"].status is NodeStatus.SUCCEEDED


# -- routing table ----------------------------------------------------------------------


def routing() -> Workflow:
    return (
        Workflow("routing")
        .task(
            "triage",
            NOOP,
            route={
                "key": "intent",
                "table": {"refund": "refund", "7": "seven"},
                "default": "other",
            },
        )
        .task("refund", NOOP, next="done")
        .task("seven", NOOP, next="done")
        .task("other", NOOP, next="done")
        .end("done")
    )


@pytest.mark.parametrize(
    ("output", "target", "label"),
    [
        ({"intent": "refund"}, "refund", "route:refund"),
        ({"intent": 7}, "seven", "route:7"),
        ({"intent": "chat"}, "other", "route:default"),
        ({}, "other", "route:default"),
        ({"intent": ["refund"]}, "other", "route:default"),
    ],
)
def test_route_looks_up_the_state_field(output: dict[str, Any], target: str, label: str) -> None:
    driver = Driver(routing().build())
    driver.start()
    driver.succeed("triage", output)
    assert driver.outstanding == [target]
    assert ("triage", label, target) in driver.path


# -- bounded loops ----------------------------------------------------------------------


def looping(limit: int) -> Workflow:
    return (
        Workflow("loop")
        .task("think", NOOP, next="check", max_visits=limit)
        .task(
            "check",
            NOOP,
            branch={"guard": handlers.by_flag, "cases": {True: "done", False: "think"}},
        )
        .end("done")
    )


def test_loop_iterations_are_part_of_the_key() -> None:
    driver = Driver(looping(3).build())
    driver.start()
    for expected in (1, 2):
        assert driver.dispatched[0] == Dispatch("think", expected, 1)
        driver.succeed("think")
        driver.succeed("check", {"flag": False})
    assert driver.dispatched[0] == Dispatch("think", 3, 1)
    driver.succeed("think")
    driver.succeed("check", {"flag": True})
    assert driver.state.status is RunStatus.SUCCEEDED
    assert driver.state.visits == {"think": 3, "check": 3, "done": 1}


def test_exceeding_max_visits_fails_the_run() -> None:
    driver = Driver(looping(2).build())
    driver.start()
    for _ in range(2):
        driver.succeed("think")
        driver.succeed("check", {"flag": False})
    assert driver.state.status is RunStatus.FAILED
    assert driver.state.reason is not None and "max_visits" in driver.state.reason
    assert ("think", "visits_exceeded", "(failed)") in driver.path
    assert driver.dispatched == []


# -- wait states ------------------------------------------------------------------------


def approval(**options: Any) -> Workflow:
    return (
        Workflow("approval", **options)
        .task("prepare", NOOP, next="approve")
        .wait(
            "approve", signals={"yes": "go", "no": "rejected"}, timeout="1h", on_timeout="escalate"
        )
        .task("escalate", NOOP, next="approve", max_visits=2)
        .task("go", NOOP, next="done")
        .end("done")
        .end("rejected", "failed")
    )


def waiting_driver() -> Driver:
    driver = Driver(approval().build())
    driver.start()
    driver.succeed("prepare")
    assert driver.state.status is RunStatus.WAITING
    return driver


def test_wait_holds_no_dispatch_and_arms_its_timeout() -> None:
    driver = waiting_driver()
    assert driver.dispatched == []
    assert list(driver.timers) == ["wait:approve:1:0"]
    assert driver.timers["wait:approve:1:0"] == pytest.approx(driver.at + 3600)
    assert driver.state.waiting_on is not None
    assert driver.state.waiting_on.node == "approve"


def test_signal_moves_the_run_and_records_actor_and_payload() -> None:
    driver = waiting_driver()
    decision = driver.signal("yes", signal_id="s-1", payload={"note": "ok"}, actor="bob")
    assert driver.state.status is RunStatus.RUNNING
    assert driver.outstanding == ["go"]
    assert list(driver.timers) == ["node_timeout:go:1:1"]  # the wait's timer is gone
    assert any(c.__class__.__name__ == "DisarmTimer" for c in decision.commands)
    recorded = driver.state.vars["decisions"]["approve"]
    assert recorded["signal"] == "yes"
    assert recorded["actor"] == "bob"
    assert recorded["payload"] == {"note": "ok"}


def test_same_signal_id_twice_is_applied_once() -> None:
    driver = waiting_driver()
    driver.signal("yes", signal_id="s-1")
    again = driver.signal("yes", signal_id="s-1")
    assert again.ignored is not None
    assert driver.outstanding == ["go"]


def test_undeclared_signal_is_refused_and_changes_nothing() -> None:
    driver = waiting_driver()
    before = driver.state.to_dict()
    with pytest.raises(UnknownSignal, match="accepts"):
        driver.signal("maybe")
    assert driver.state.to_dict() == before


def test_signal_to_a_run_that_is_not_waiting_is_refused() -> None:
    driver = Driver(approval().build())
    driver.start()
    with pytest.raises(NotWaiting):
        driver.signal("yes")


def test_second_decision_on_a_decided_wait_is_refused() -> None:
    driver = waiting_driver()
    driver.fire("wait:approve")  # timeout -> escalate -> waits again at visit 2
    driver.succeed("escalate")
    assert driver.state.waiting_on is not None
    assert driver.state.waiting_on.iteration == 2
    with pytest.raises(EventRejected, match="already decided"):
        driver.signal("yes", wait="approve", iteration=1)
    driver.signal("yes", wait="approve", iteration=2)
    assert driver.outstanding == ["go"]


def test_timeout_escalates_then_the_bound_ends_the_run() -> None:
    driver = waiting_driver()
    driver.fire("wait:approve")
    assert driver.state.nodes["approve"].status is NodeStatus.TIMED_OUT
    driver.succeed("escalate")
    driver.fire("wait:approve")
    driver.succeed("escalate")
    driver.fire("wait:approve")  # a third escalation exceeds max_visits=2
    assert driver.state.status is RunStatus.FAILED
    assert ("approve", "timeout", "escalate") in driver.path


def test_cancel_while_waiting_ends_cancelled_at_once() -> None:
    driver = waiting_driver()
    decision = driver.cancel("changed my mind")
    assert driver.state.status is RunStatus.CANCELLED
    assert driver.state.nodes["approve"].status is NodeStatus.CANCELLED
    assert driver.state.cancel == {"reason": "changed my mind", "actor": "alice", "at": driver.at}
    assert driver.timers == {}
    assert FinishRun(RunStatus.CANCELLED, "changed my mind") in decision.commands


def test_timer_fired_twice_is_ignored() -> None:
    driver = waiting_driver()
    driver.fire("wait:approve")
    again = decide(
        driver.definition, driver.state, TimerFired(at=driver.at, timer_id="wait:approve:1:0")
    )
    assert again.ignored is not None and "not armed" in again.ignored


# -- retries and error edges ------------------------------------------------------------


def retrying(attempts: int = 3, **retry: Any) -> Workflow:
    return (
        Workflow("retrying")
        .task(
            "call",
            NOOP,
            next="done",
            retry={"attempts": attempts, "backoff": "1s", "max_delay": "10s", **retry},
            on_error={"business": "manual"},
        )
        .task("manual", NOOP, next="done")
        .end("done")
    )


def test_transient_failure_retries_with_a_durable_timer_and_the_same_key() -> None:
    driver = Driver(retrying().build())
    driver.start()
    decision = driver.fail("call", ErrorClass.TRANSIENT, "503")
    assert driver.state.nodes["call"].status is NodeStatus.RETRYING
    assert driver.dispatched == []  # nothing sleeps in a worker or a broker
    (timer,) = driver.timers
    assert timer == "retry:call:1:1"
    delay = driver.timers[timer] - driver.at
    assert 0 <= delay <= 1.0
    assert ("call", "retry", "call") in [
        (t.source, t.label, t.target) for t in decision.transitions
    ]
    driver.fire("retry:call")
    assert driver.dispatched == [Dispatch("call", 1, 2)]
    driver.fail("call", ErrorClass.TRANSIENT, "503 again")
    driver.fire("retry:call")
    driver.succeed("call")
    assert driver.state.status is RunStatus.SUCCEEDED


def test_retries_exhausted_fail_the_run_with_the_last_error() -> None:
    driver = Driver(retrying(attempts=2).build())
    driver.start()
    driver.fail("call", ErrorClass.TRANSIENT)
    driver.fire("retry:call")
    driver.fail("call", ErrorClass.TRANSIENT, "still down")
    assert driver.state.status is RunStatus.FAILED
    assert "still down" in (driver.state.reason or "")


def test_retry_deadline_stops_retries_early() -> None:
    driver = Driver(
        retrying(attempts=10, backoff="30s", max_delay="30s", jitter="none", deadline="45s").build()
    )
    driver.start()
    driver.fail("call", ErrorClass.TRANSIENT)  # t+0 -> retry at +30s, within 45s
    driver.fire("retry:call")
    driver.fail("call", ErrorClass.TRANSIENT)  # next retry would land past the deadline
    assert driver.state.status is RunStatus.FAILED


@pytest.mark.parametrize("error_class", [ErrorClass.PERMANENT, ErrorClass.BUSINESS])
def test_non_transient_failures_are_not_retried(error_class: ErrorClass) -> None:
    driver = Driver(retrying().build())
    driver.start()
    driver.fail("call", error_class)
    if error_class is ErrorClass.BUSINESS:
        assert driver.outstanding == ["manual"]
        assert ("call", "failed:business", "manual") in driver.path
    else:
        assert driver.state.status is RunStatus.FAILED
        assert ("call", "failed:permanent", "(failed)") in driver.path


def test_backoff_is_exponential_capped_and_deterministic() -> None:
    policy = RetryPolicy(attempts=10, jitter=Jitter.NONE)
    assert [retry_delay_s(policy, "r", "n", 1, attempt) for attempt in (1, 2, 3, 4)] == [
        1.0,
        2.0,
        4.0,
        8.0,
    ]
    assert retry_delay_s(policy, "r", "n", 1, 60) == policy.max_delay.total_seconds()
    jittered = RetryPolicy(attempts=10)
    delays = {retry_delay_s(jittered, f"run-{i}", "n", 1, 3) for i in range(50)}
    assert len(delays) > 40 and all(0 <= d <= 4.0 for d in delays)
    assert retry_delay_s(jittered, "run-1", "n", 1, 3) == retry_delay_s(
        jittered, "run-1", "n", 1, 3
    )


def test_node_timeout_counts_as_transient_and_asks_the_worker_to_stop() -> None:
    wf = (
        Workflow("slow")
        .task("slow", NOOP, next="done", timeout="30s", retry={"attempts": 2})
        .end("done")
    )
    driver = Driver(wf.build())
    driver.start()
    decision = driver.fire("node_timeout:slow:1:1")
    assert CancelNode("slow", 1, 1, "timed out") in decision.commands
    assert driver.state.nodes["slow"].status is NodeStatus.RETRYING
    late = decide(
        driver.definition,
        driver.state,
        NodeSucceeded(at=driver.at + 1, node="slow", iteration=1, attempt=1),
    )
    assert late.ignored is not None  # the first attempt was given up on
    driver.take("slow")
    driver.fire("retry:slow")
    driver.fire("node_timeout:slow:1:2")
    assert driver.state.nodes["slow"].status is NodeStatus.TIMED_OUT
    assert driver.state.status is RunStatus.FAILED


# -- parallel fan-out / fan-in ----------------------------------------------------------


def fan_out(
    join: dict[str, Any], *, defaults: dict[str, Any] | None = None, **options: Any
) -> Workflow:
    wf = (
        Workflow("fan", **options)
        .task("prep", NOOP, next="fan")
        .parallel(
            "fan", ["a", "b", "c"], join=join, next="after", on_error={"permanent": "fallback"}
        )
    )
    for branch in ("a", "b", "c"):
        wf.task(branch, NOOP, default=(defaults or {}).get(branch))
    return wf.task("after", NOOP, next="done").task("fallback", NOOP, next="done").end("done")


def fanned(join: dict[str, Any], **kwargs: Any) -> Driver:
    driver = Driver(fan_out(join, **kwargs).build())
    driver.start()
    driver.succeed("prep", {"shared": 0})
    assert sorted(driver.outstanding) == ["a", "b", "c"]
    return driver


def test_join_all_waits_for_every_branch_and_merges_in_declared_order() -> None:
    driver = fanned({"policy": "all"})
    driver.succeed("c", {"who": "c", "c": 3})
    driver.succeed("a", {"who": "a", "a": 1})
    assert driver.outstanding == ["b"]
    assert "a" not in driver.state.vars  # branch outputs wait for the join
    driver.succeed("b", {"who": "b", "b": 2})
    assert driver.outstanding == ["after"]
    assert driver.state.vars == {"shared": 0, "a": 1, "b": 2, "c": 3, "who": "c"}
    assert ("fan", "joined", "after") in driver.path


def test_join_all_fails_on_one_branch_failure_and_cancels_the_rest() -> None:
    driver = fanned({"policy": "all"})
    decision = driver.fail("b")
    assert {c.node for c in decision.commands if isinstance(c, CancelNode)} == {"a", "c"}
    assert driver.state.nodes["a"].status is NodeStatus.CANCELLED
    assert driver.state.nodes["fan"].status is NodeStatus.FAILED
    assert driver.outstanding == ["a", "c", "fallback"]  # a and c were asked to stop
    assert ("fan", "failed:permanent", "fallback") in driver.path


def test_a_branch_is_isolated_its_retry_touches_no_sibling() -> None:
    wf = fan_out({"policy": "all"})
    wf.nodes["b"]["retry"] = {"attempts": 3, "backoff": "1s"}
    driver = Driver(wf.build())
    driver.start()
    driver.succeed("prep")
    driver.fail("b", ErrorClass.TRANSIENT)
    assert driver.state.nodes["b"].status is NodeStatus.RETRYING
    assert driver.state.nodes["a"].status is NodeStatus.SCHEDULED
    driver.succeed("a")
    driver.succeed("c")
    driver.fire("retry:b")
    driver.succeed("b")
    assert driver.outstanding == ["after"]


def test_join_quorum_proceeds_at_k_and_cancels_the_rest() -> None:
    driver = fanned({"policy": "quorum", "k": 2})
    driver.fail("a")
    driver.succeed("b", {"b": 1})
    assert "after" not in driver.outstanding
    decision = driver.succeed("c", {"c": 1})
    assert "after" in driver.outstanding
    assert driver.state.joins["fan"].done
    assert driver.state.joins["fan"].outcomes["a"] is BranchOutcome.FAILED
    assert not [c for c in decision.commands if isinstance(c, CancelNode)]  # none left


def test_join_quorum_rest_cancel_stops_stragglers() -> None:
    driver = fanned({"policy": "quorum", "k": 1})
    decision = driver.succeed("b")
    assert {c.node for c in decision.commands if isinstance(c, CancelNode)} == {"a", "c"}
    late = decide(
        driver.definition,
        driver.state,
        NodeSucceeded(at=driver.at + 1, node="a", output={"late": True}),
    )
    assert late.ignored is not None


def test_join_quorum_rest_finish_keeps_late_results_readable() -> None:
    driver = fanned({"policy": "quorum", "k": 1, "rest": "finish"})
    decision = driver.succeed("b")
    assert not [c for c in decision.commands if isinstance(c, CancelNode)]
    driver.succeed("a", {"late": True})
    assert driver.state.joins["fan"].outputs["a"] == {"late": True}
    assert "late" not in driver.state.vars


def test_join_quorum_fails_when_it_can_no_longer_be_reached() -> None:
    driver = fanned({"policy": "quorum", "k": 2})
    driver.fail("a")
    driver.fail("b")
    assert driver.state.nodes["fan"].status is NodeStatus.FAILED
    assert "fallback" in driver.outstanding


def test_join_critical_tolerates_others_with_their_default() -> None:
    driver = fanned({"policy": "critical", "critical": ["a"]}, defaults={"b": {"b": "n/a"}})
    driver.fail("b")
    driver.fail("c")  # no default: contributes nothing
    driver.succeed("a", {"a": 1})
    assert "after" in driver.outstanding
    assert driver.state.vars["b"] == "n/a"
    assert driver.state.joins["fan"].outcomes["b"] is BranchOutcome.DEFAULTED
    assert driver.state.joins["fan"].outcomes["c"] is BranchOutcome.FAILED


def test_join_critical_fails_when_a_critical_branch_fails() -> None:
    driver = fanned({"policy": "critical", "critical": ["a"]})
    driver.fail("a")
    assert driver.state.nodes["fan"].status is NodeStatus.FAILED


def test_join_timeout_cancels_unfinished_branches_which_take_their_default() -> None:
    driver = fanned({"policy": "all", "timeout": "5m"}, defaults={"c": {"c": "slow"}})
    driver.succeed("a", {"a": 1})
    driver.succeed("b", {"b": 2})
    decision = driver.fire("join_timeout:fan")
    assert CancelNode("c", 1, 1, "the join timed out") in decision.commands
    assert driver.state.nodes["c"].status is NodeStatus.CANCELLED
    assert driver.state.vars["c"] == "slow"
    assert "after" in driver.outstanding


def test_join_timeout_without_default_counts_as_failed() -> None:
    driver = fanned({"policy": "all", "timeout": "5m"})
    driver.succeed("a")
    driver.fire("join_timeout:fan")
    assert driver.state.nodes["fan"].status is NodeStatus.FAILED
    assert "fallback" in driver.outstanding


def test_branch_cancelled_by_a_worker_counts_as_failed_for_the_join() -> None:
    driver = fanned({"policy": "quorum", "k": 3})
    command = driver.take("a")
    driver.apply(
        NodeCancelled(
            at=driver.tick(), node="a", iteration=command.iteration, attempt=command.attempt
        )
    )
    assert driver.state.joins["fan"].outcomes["a"] is BranchOutcome.CANCELLED
    assert driver.state.nodes["fan"].status is NodeStatus.FAILED


# -- cancellation -----------------------------------------------------------------------


def test_cancel_while_running_drains_then_ends_cancelled() -> None:
    driver = Driver(chain("a", "b").build())
    driver.start()
    decision = driver.cancel()
    assert driver.state.status is RunStatus.CANCELLING
    assert CancelNode("a", 1, 1, "user asked") in decision.commands
    assert "cancel:" in next(iter(driver.timers))
    driver.succeed("a", {"partial": "kept"})  # finished before it saw the cancel
    assert driver.state.status is RunStatus.CANCELLED
    assert driver.state.vars["partial"] == "kept"
    assert driver.outstanding == []  # nothing new was dispatched
    assert driver.timers == {}


def test_cancel_acknowledged_by_the_worker() -> None:
    driver = Driver(chain("a").build())
    driver.start()
    driver.cancel()
    command = driver.take("a")
    driver.apply(
        NodeCancelled(
            at=driver.tick(), node="a", iteration=command.iteration, attempt=command.attempt
        )
    )
    assert driver.state.status is RunStatus.CANCELLED
    assert driver.state.nodes["a"].status is NodeStatus.CANCELLED


def test_cancel_timeout_detaches_nodes_that_do_not_stop() -> None:
    driver = Driver(chain("a").build())
    driver.start()
    driver.cancel()
    decision = driver.fire("cancel:")
    assert DetachNode("a", 1, 1) in decision.commands
    assert driver.state.status is RunStatus.CANCELLED


def test_cancel_of_a_finished_run_is_illegal() -> None:
    driver = Driver(chain("a").build())
    driver.start()
    driver.succeed("a")
    with pytest.raises(IllegalTransition, match="finished"):
        driver.cancel()


def test_cancel_before_start_ends_cancelled() -> None:
    driver = Driver(chain("a").build())
    driver.cancel()
    assert driver.state.status is RunStatus.CANCELLED
    with pytest.raises(IllegalTransition):
        driver.start()


def test_second_cancel_is_ignored() -> None:
    driver = Driver(chain("a").build())
    driver.start()
    driver.cancel()
    assert driver.cancel().ignored is not None


# -- compensation (saga) ----------------------------------------------------------------


def saga(**options: Any) -> Workflow:
    return (
        Workflow("saga", **options)
        .task("one", NOOP, next="two", compensate=handlers.undo)
        .task(
            "two",
            NOOP,
            next="three",
            compensate=handlers.undo,
            retry={"attempts": 2, "backoff": "1s"},
        )
        .task("three", NOOP, next="done")
        .end("done")
    )


def test_failure_after_compensable_steps_compensates_in_reverse_order() -> None:
    driver = Driver(saga().build())
    driver.start()
    driver.succeed("one")
    driver.succeed("two")
    driver.fail("three", ErrorClass.PERMANENT, "card declined")
    assert driver.state.status is RunStatus.COMPENSATING
    assert driver.dispatched == [Dispatch("two", 1, 1, Phase.COMPENSATE)]
    driver.run("two")
    assert driver.dispatched == [Dispatch("one", 1, 1, Phase.COMPENSATE)]
    driver.run("one")
    assert driver.state.status is RunStatus.COMPENSATED
    assert "card declined" in (driver.state.reason or "")
    assert driver.state.vars["undone"] == ["x", "x"]


def test_duplicate_compensation_result_is_ignored() -> None:
    driver = Driver(saga().build())
    driver.start()
    driver.succeed("one")
    driver.fail("two", ErrorClass.PERMANENT)
    driver.succeed("one")
    assert driver.state.status is RunStatus.COMPENSATED
    again = decide(
        driver.definition,
        driver.state,
        NodeSucceeded(at=driver.at + 1, node="one", phase=Phase.COMPENSATE),
    )
    assert again.ignored is not None


def held_compensation() -> Driver:
    driver = Driver(saga().build())
    driver.start()
    driver.succeed("one")
    driver.succeed("two")
    driver.fail("three")
    driver.fail("two", ErrorClass.TRANSIENT, "api down")
    driver.fire("compensation_retry:two")
    assert driver.dispatched == [Dispatch("two", 1, 2, Phase.COMPENSATE)]
    decision = driver.fail("two", ErrorClass.TRANSIENT, "api still down")
    assert HoldExecution("two", 1, 2, Phase.COMPENSATE) in decision.commands
    return driver


def test_compensation_retries_then_waits_for_an_operator() -> None:
    driver = held_compensation()
    assert driver.state.status is RunStatus.COMPENSATING  # not guessed: a person decides
    (held, phase), *_ = driver.state.held
    assert (held.node, phase, held.status) == ("two", Phase.COMPENSATE, NodeStatus.HELD)
    assert "api still down" in (held.error or "")
    assert driver.dispatched == []


def test_an_operator_failing_a_held_compensation_fails_the_run_with_the_scene() -> None:
    driver = held_compensation()
    driver.signal("recovery.fail", payload={"reason": "the refund API is gone"})
    assert driver.state.status is RunStatus.FAILED
    assert "compensation of two" in (driver.state.reason or "")
    assert "the refund API is gone" in (driver.state.reason or "")
    assert driver.dispatched == []  # one is not compensated: the run stops there


def test_an_operator_completing_a_held_compensation_goes_on_undoing() -> None:
    driver = held_compensation()
    driver.signal("recovery.complete", payload={"output": {"refunded_by": "hand"}})
    assert driver.dispatched == [Dispatch("one", 1, 1, Phase.COMPENSATE)]
    driver.run("one")
    assert driver.state.status is RunStatus.COMPENSATED


def test_cancel_with_compensate_on_cancel_undoes_then_ends_cancelled() -> None:
    driver = Driver(saga(compensate_on_cancel=True).build())
    driver.start()
    driver.succeed("one")
    driver.cancel()
    driver.succeed("two")  # finished during cancelling: it is compensated too
    assert driver.state.status is RunStatus.COMPENSATING
    driver.succeed("two")
    driver.succeed("one")
    assert driver.state.status is RunStatus.CANCELLED


def test_reaching_a_failed_end_compensates() -> None:
    wf = (
        Workflow("reject")
        .task("book", NOOP, next="rejected", compensate=handlers.undo)
        .end("rejected", "failed")
    )
    driver = Driver(wf.build())
    driver.start()
    driver.succeed("book")
    assert driver.state.status is RunStatus.COMPENSATING
    driver.succeed("book")
    assert driver.state.status is RunStatus.COMPENSATED


# -- the flight example, end to end through the decider ---------------------------------


def test_flight_booking_cheap_path(flight: Any) -> None:
    driver = Driver(flight)
    driver.start(origin="BER", destination="LIS", passengers=2, follow_up="please refund me")
    state = driver.run_to_end()
    assert state.status is RunStatus.SUCCEEDED
    assert state.vars["booking"] is None and state.vars["refunded_eur"] == 378
    assert ("price_check", "case:true", "reserve") in driver.path
    assert ("triage", "route:refund", "refund") in driver.path


def test_flight_booking_expensive_path_waits_for_approval(flight: Any) -> None:
    driver = Driver(flight)
    driver.start(origin="BER", destination="NRT", passengers=1)
    driver.run_to_end()
    assert driver.state.status is RunStatus.WAITING
    driver.signal("approve", actor="manager")
    state = driver.run_to_end()
    assert state.status is RunStatus.SUCCEEDED
    assert state.vars["booking"].startswith("PNR-")


def test_flight_booking_permanent_reserve_failure_takes_the_rejected_edge(flight: Any) -> None:
    driver = Driver(flight)
    driver.start(origin="BER", destination="LIS")
    driver.run("search")
    driver.run("price_check")
    driver.fail("reserve", ErrorClass.PERMANENT, "fare gone")
    assert ("reserve", "failed:permanent", "rejected") in driver.path
    assert driver.state.status is RunStatus.FAILED  # nothing was reserved: no compensation
    assert driver.outstanding == []


def test_flight_booking_failing_after_reserve_releases_the_seat(flight: Any) -> None:
    driver = Driver(flight)
    driver.start(origin="BER", destination="LIS")
    for node in ("search", "price_check", "reserve"):
        driver.run(node)
    booking = driver.state.vars["booking"]
    driver.fail("email", ErrorClass.PERMANENT, "mailbox full")
    driver.fail("sms", ErrorClass.PERMANENT, "no signal")  # quorum 1 can no longer be met
    assert driver.state.status is RunStatus.COMPENSATING
    driver.run("reserve")  # its compensation: release_seat
    assert driver.state.status is RunStatus.COMPENSATED
    assert driver.state.vars["released"] == booking


def test_unknown_event_type_is_rejected() -> None:
    driver = Driver(chain("a").build())
    with pytest.raises(EventRejected):
        decide(driver.definition, driver.state, SignalReceived.__mro__[1](at=1.0))  # bare Event
