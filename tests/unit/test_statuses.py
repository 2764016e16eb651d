"""The run and node transition tables: only listed changes are allowed."""

from __future__ import annotations

import itertools

import pytest

from cairn.errors import IllegalTransition
from cairn.model.statuses import (
    NODE_TERMINAL,
    NODE_TRANSITIONS,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    NodeStatus,
    RunStatus,
    advance_node,
    advance_run,
)

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
