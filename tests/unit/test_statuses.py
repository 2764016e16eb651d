"""The run and node transition tables: only listed changes are allowed."""

from __future__ import annotations

import itertools

import pytest

from cairn.errors import IllegalTransition
from cairn.model.statuses import (
    EXECUTION_TRANSITIONS,
    NODE_TERMINAL,
    NODE_TRANSITIONS,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    NodeStatus,
    RunStatus,
    advance_node,
    advance_run,
    stopped_execution,
)
from cairn.model.statuses import ExecutionStatus as E
from cairn.store.clauses import ACTIVE_EXECUTION

RUN_PAIRS = list(itertools.product(RunStatus, RunStatus))
NODE_PAIRS = list(itertools.product(NodeStatus, NodeStatus))


def test_every_status_has_a_row() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    assert set(NODE_TRANSITIONS) == set(NodeStatus)


def test_terminal_statuses_have_no_way_out() -> None:
    assert {s for s in RunStatus if not RUN_TRANSITIONS[s]} == RUN_TERMINAL
    assert {s for s in NodeStatus if not NODE_TRANSITIONS[s]} == NODE_TERMINAL
    assert RunStatus.SUCCEEDED.terminal and not RunStatus.WAITING.terminal


@pytest.mark.parametrize(("current", "target"), RUN_PAIRS)
def test_run_transitions_follow_the_table(current: RunStatus, target: RunStatus) -> None:
    if target in RUN_TRANSITIONS[current]:
        assert advance_run("r1", current, target) is target
    else:
        with pytest.raises(IllegalTransition) as caught:
            advance_run("r1", current, target)
        assert (caught.value.current, caught.value.target) == (current.value, target.value)
        assert caught.value.machine == "run"


@pytest.mark.parametrize(("current", "target"), NODE_PAIRS)
def test_node_transitions_follow_the_table(current: NodeStatus, target: NodeStatus) -> None:
    if target in NODE_TRANSITIONS[current]:
        assert advance_node("r1/n#1", current, target) is target
    else:
        with pytest.raises(IllegalTransition):
            advance_node("r1/n#1", current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (RunStatus.SUCCEEDED, RunStatus.RUNNING),  # revive a finished run
        (RunStatus.FAILED, RunStatus.SUCCEEDED),
        (RunStatus.CANCELLED, RunStatus.RUNNING),
        (RunStatus.CANCELLING, RunStatus.RUNNING),  # un-cancel
        (RunStatus.PENDING, RunStatus.COMPENSATED),
    ],
)
def test_the_field_s_classic_illegal_run_moves(current: RunStatus, target: RunStatus) -> None:
    with pytest.raises(IllegalTransition, match="not allowed"):
        advance_run("r1", current, target)


def test_approving_twice_is_illegal_for_the_wait_node() -> None:
    decided = advance_node("r1/approval#1", NodeStatus.WAITING, NodeStatus.SUCCEEDED)
    with pytest.raises(IllegalTransition, match="finished"):
        advance_node("r1/approval#1", decided, NodeStatus.SUCCEEDED)


def test_illegal_transition_serialises() -> None:
    error = IllegalTransition("run", "r1", "succeeded", "running", "the run is finished")
    assert error.to_dict() == {
        "code": "illegal_transition",
        "message": "run r1: succeeded -> running is not allowed: the run is finished",
    }


# -- executions: the store's guarded writes move only along the table -----------------


def test_the_stores_guarded_writes_follow_the_execution_table() -> None:
    """Each guarded write of cairn.store states the statuses it moves from; every one of
    those moves is in EXECUTION_TRANSITIONS (a write the table forbids is a bug)."""
    stop_sources = ACTIVE_EXECUTION
    for target in (E.CANCELLED, E.TIMED_OUT, E.HELD):  # stopping: cancel, detach, time out
        assert all(target in EXECUTION_TRANSITIONS[E(s)] for s in stop_sources)
    hold_sources = [*ACTIVE_EXECUTION, E.FAILED.value]
    assert all(E.HELD in EXECUTION_TRANSITIONS[E(s)] for s in hold_sources)
    for settled in (E.SUCCEEDED, E.FAILED, E.CANCELLED):
        assert settled in EXECUTION_TRANSITIONS[E.HELD]
    # A dispatch (the next attempt) may follow every status a retry starts from.
    for retried in (E.SCHEDULED, E.RUNNING, E.FAILED, E.TIMED_OUT, E.HELD):
        assert E.SCHEDULED in EXECUTION_TRANSITIONS[retried]


def test_a_stopped_execution_records_what_its_attempt_did() -> None:
    assert stopped_execution(NodeStatus.CANCELLED) is E.CANCELLED
    assert stopped_execution(NodeStatus.TIMED_OUT) is E.TIMED_OUT
    assert stopped_execution(NodeStatus.HELD) is E.HELD
    # The node retries after its attempt timed out: the row is the attempt's.
    assert stopped_execution(NodeStatus.RETRYING) is E.TIMED_OUT
    with pytest.raises(ValueError, match="'waiting' is not a valid ExecutionStatus"):
        stopped_execution(NodeStatus.WAITING)  # a wait has no execution to stop
