"""Run, node and execution statuses, each with its explicit transition table.

A run's and a node's status (in the run state the decider keeps) change only through
:func:`advance_run` and :func:`advance_node`: a change not listed raises
:class:`~cairn.errors.IllegalTransition` before anything is written. An execution's
status is the idempotency table's (``node_executions``, one row per run, node, visit and
phase, its attempts in turn): :data:`EXECUTION_TRANSITIONS` is the machine the store's
guarded writes implement, and the tests hold the two together.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from cairn.errors import IllegalTransition


class RunStatus(StrEnum):
    """Where a run stands; its transitions are in docs/state-machines.md."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    CANCELLING = "cancelling"
    COMPENSATING = "compensating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    COMPENSATED = "compensated"
    ROLLED_BACK = "rolled_back"

    @property
    def terminal(self) -> bool:
        """True once the run has ended: nothing moves it again."""
        return self in RUN_TERMINAL


RUN_TERMINAL = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.COMPENSATED,
        RunStatus.ROLLED_BACK,
    }
)

_R = RunStatus
RUN_TRANSITIONS: Mapping[RunStatus, frozenset[RunStatus]] = {
    # One decision may pass through nodes without handlers, so a run's first decision can
    # end anywhere its first dispatch-free path leads: a wait, an end, or a failure (with
    # compensation, if a handler-less node on the way declared one). A run cancelled before
    # it started has nothing to stop.
    _R.PENDING: frozenset(
        {_R.RUNNING, _R.WAITING, _R.FAILED, _R.SUCCEEDED, _R.CANCELLED, _R.COMPENSATING}
    ),
    _R.RUNNING: frozenset(
        {_R.WAITING, _R.CANCELLING, _R.COMPENSATING, _R.SUCCEEDED, _R.FAILED, _R.CANCELLED}
    ),
    # A wait's signal or timeout may lead straight to an end node.
    _R.WAITING: frozenset(
        {_R.RUNNING, _R.CANCELLING, _R.COMPENSATING, _R.SUCCEEDED, _R.FAILED, _R.CANCELLED}
    ),
    # Cancelling drains the running nodes, then compensates (if the workflow asks, or it
    # is a rollback) or ends (a rollback with nothing to undo is rolled back at once).
    _R.CANCELLING: frozenset({_R.COMPENSATING, _R.CANCELLED, _R.ROLLED_BACK}),
    # Compensation ends compensated, cancelled (compensate-on-cancel), or failed when a
    # compensation itself cannot be carried out; or, rolling back to a checkpoint, the
    # run resumes from it (the only way back to running, and only through an operator's
    # confirmed rollback: a cancel is never undone).
    _R.COMPENSATING: frozenset(
        {_R.COMPENSATED, _R.CANCELLED, _R.FAILED, _R.ROLLED_BACK, _R.RUNNING, _R.WAITING}
    ),
    _R.SUCCEEDED: frozenset(),
    _R.FAILED: frozenset(),
    _R.CANCELLED: frozenset(),
    _R.COMPENSATED: frozenset(),
    _R.ROLLED_BACK: frozenset(),
}


class NodeStatus(StrEnum):
    """Where one execution of a node stands (keyed by run, node and iteration)."""

    SCHEDULED = "scheduled"
    RUNNING = "running"
    WAITING = "waiting"
    RETRYING = "retrying"
    HELD = "held"  # lost its worker; recovery waits for an operator's decision
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    TIMED_OUT = "timed_out"

    @property
    def terminal(self) -> bool:
        """True once the execution has ended."""
        return self in NODE_TERMINAL


NODE_TERMINAL = frozenset(
    {
        NodeStatus.SUCCEEDED,
        NodeStatus.FAILED,
        NodeStatus.CANCELLED,
        NodeStatus.SKIPPED,
        NodeStatus.TIMED_OUT,
    }
)

_N = NodeStatus
NODE_TRANSITIONS: Mapping[NodeStatus, frozenset[NodeStatus]] = {
    # scheduled -> succeeded/failed directly: a worker's claim (scheduled -> running) is
    # recorded in the idempotency table, and the run's view may learn of it only with
    # the result, so the run does not pay a commit per claim.
    _N.SCHEDULED: frozenset(
        {
            _N.RUNNING,
            _N.SUCCEEDED,
            _N.FAILED,
            _N.RETRYING,
            _N.CANCELLED,
            _N.SKIPPED,
            _N.TIMED_OUT,
            _N.HELD,
        }
    ),
    _N.RUNNING: frozenset(
        {_N.SUCCEEDED, _N.FAILED, _N.RETRYING, _N.CANCELLED, _N.TIMED_OUT, _N.HELD}
    ),
    # A wait node is decided by a signal (succeeded), its timeout, or a cancel.
    _N.WAITING: frozenset({_N.SUCCEEDED, _N.TIMED_OUT, _N.CANCELLED}),
    # A retry timer re-dispatches the same key with the next attempt.
    _N.RETRYING: frozenset({_N.SCHEDULED, _N.CANCELLED}),
    # A held execution (its worker was lost, and recovery needs a person) is run again
    # (scheduled), settled by the operator as having run (running, then its result), or
    # cancelled with the run.
    _N.HELD: frozenset({_N.SCHEDULED, _N.RUNNING, _N.CANCELLED}),
    _N.SUCCEEDED: frozenset(),
    _N.FAILED: frozenset(),
    _N.CANCELLED: frozenset(),
    _N.SKIPPED: frozenset(),
    _N.TIMED_OUT: frozenset(),
}


class ExecutionStatus(StrEnum):
    """An execution's row in the idempotency table."""

    SCHEDULED = "scheduled"  # dispatched (this attempt): a worker may claim it
    RUNNING = "running"  # a claim is on record (a takeover's, or an irreversible node's)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"
    HELD = "held"  # recovery waits for an operator's decision

    @property
    def active(self) -> bool:
        """Still expecting a result from a worker."""
        return self in EXECUTION_ACTIVE


EXECUTION_ACTIVE = frozenset({ExecutionStatus.SCHEDULED, ExecutionStatus.RUNNING})

_E = ExecutionStatus
EXECUTION_TRANSITIONS: Mapping[ExecutionStatus, frozenset[ExecutionStatus]] = {
    # A first claim is not written (a commit per step): scheduled goes straight to its
    # result; a takeover's or an irreversible node's claim makes it running first. A newer
    # attempt dispatched while an older one is still on record resets it to scheduled.
    _E.SCHEDULED: frozenset(
        {_E.SCHEDULED, _E.RUNNING, _E.SUCCEEDED, _E.FAILED, _E.CANCELLED, _E.TIMED_OUT}
        | {_E.SKIPPED, _E.HELD}
    ),
    _E.RUNNING: frozenset(
        {_E.SCHEDULED, _E.RUNNING, _E.SUCCEEDED, _E.FAILED, _E.CANCELLED, _E.TIMED_OUT} | {_E.HELD}
    ),
    # A failed attempt is retried (the next attempt), or — a compensation that failed
    # for good — held for an operator.
    _E.FAILED: frozenset({_E.SCHEDULED, _E.HELD}),
    _E.TIMED_OUT: frozenset({_E.SCHEDULED}),
    # An operator runs it again (scheduled), or settles it (succeeded, failed); a cancel
    # releases it.
    _E.HELD: frozenset({_E.SCHEDULED, _E.SUCCEEDED, _E.FAILED, _E.CANCELLED}),
    _E.SUCCEEDED: frozenset(),
    _E.CANCELLED: frozenset(),
    _E.SKIPPED: frozenset(),
}


def stopped_execution(node: NodeStatus) -> ExecutionStatus:
    """What an execution's row records when its run stops waiting for it (cancelled,
    detached, timed out): the node's status — or, for a node that will retry after this
    attempt timed out, ``timed_out``: the row is the attempt's, not the node's."""
    if node is NodeStatus.RETRYING:
        return ExecutionStatus.TIMED_OUT
    return ExecutionStatus(node.value)


def advance_run(subject: str, current: RunStatus, target: RunStatus) -> RunStatus:
    """Check that a run may move from ``current`` to ``target``; return ``target``."""
    if target not in RUN_TRANSITIONS[current]:
        why = "the run is finished" if current.terminal else ""
        raise IllegalTransition("run", subject, current.value, target.value, why)
    return target


def advance_node(subject: str, current: NodeStatus, target: NodeStatus) -> NodeStatus:
    """Check that a node execution may move from ``current`` to ``target``; return ``target``."""
    if target not in NODE_TRANSITIONS[current]:
        why = "the node execution is finished" if current.terminal else ""
        raise IllegalTransition("node", subject, current.value, target.value, why)
    return target


def advance_execution(
    subject: str, current: ExecutionStatus, target: ExecutionStatus
) -> ExecutionStatus:
    """Check that an execution's row may move from ``current`` to ``target``."""
    if target not in EXECUTION_TRANSITIONS[current]:
        raise IllegalTransition("execution", subject, current.value, target.value)
    return target
