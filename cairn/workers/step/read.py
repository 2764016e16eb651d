"""Stage 1, read: the execution, its run, the definition and the restored state, in one
statement and the database's clock (no statement for an execution a step this process
committed just dispatched: its commit left them) — or why there is nothing to run
(finished, superseded, the run ended, its queue paused)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cairn.engine.executions import Begun, Skip
from cairn.engine.reads import Restored
from cairn.errors import UnknownNode
from cairn.model.definition import AnyNode, TaskNode, WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.messages import InvalidMessage, NodeMessage, message_namespace
from cairn.model.state import RunState
from cairn.model.statuses import ExecutionStatus
from cairn.store.records import ExecutionHead, RunRecord
from cairn.workers.paused import hold_for_pause
from cairn.workers.step.handled import Handled

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner

# An execution dispatched by a step this process committed less than this long ago is
# begun from what that step left (:func:`_within`).
HEAD_READ_WITHIN_S = 2.0


@dataclass(frozen=True)
class Read:
    """What a message runs: its node and handler, on the state the decider last left."""

    message: NodeMessage  # published on with its run's priority and namespace
    execution: ExecutionHead
    run: RunRecord
    definition: WorkflowDefinition
    node: AnyNode
    handler: Any  # the reference to resolve: the node's handler, or its compensation
    known: Restored  # the run, its state, and the database's time of the read
    irreversible: bool

    @property
    def state(self) -> RunState:
        return self.known.state


@dataclass(frozen=True)
class Unstarted:
    """The run is being cancelled and this node has not started here: nothing runs, the
    cancel is acknowledged for it (:func:`cairn.workers.step.commit.cancel_unstarted`)."""

    message: NodeMessage
    fence_floor: int


def read(runner: NodeRunner, message: NodeMessage) -> Read | Unstarted | Handled:
    """Answered by the step this process committed just before, when that step
    dispatched the message's execution (kept by this worker, or a sibling delivered
    here): :meth:`cairn.engine.executions.Executions.begin_here`; else one statement."""
    key = message.key
    begun: Begun | Skip | None = runner.executions.begin_here(message, _within(runner))
    if begun is None:
        begun = runner._through_outages(f"reading {key}", lambda: runner.executions.begin(message))
    if isinstance(begun, Skip):
        return _SKIPPED[begun]
    runner.code.loaded(message)
    execution, run, definition, state = begun.execution, begun.run, begun.definition, begun.state
    runner.code.settle()
    # What the messages it leads to are published with (a fused chain's next node).
    message = replace(message, priority=run.priority, namespace=message_namespace(run.namespace))
    if runner.pauses.holds(message):  # back to the outbox until it resumes
        outbox = runner.outbox
        runner._through_outages(f"holding {key}", lambda: hold_for_pause(outbox, message))
        return Handled.PAUSED
    db_time = execution.db_now
    if state is None and message.phase is Phase.RUN:
        return Unstarted(message, execution.fence)
    node = definition.nodes.get(message.node)
    if node is None:
        raise UnknownNode(f"{definition.key} has no node {message.node!r}")
    irreversible = isinstance(node, TaskNode) and node.irreversible
    if irreversible and execution.status != ExecutionStatus.SCHEDULED:
        return Handled.UNCONFIRMED  # a redelivery after its worker was lost
    ref = (
        node.compensate
        if message.phase is Phase.COMPENSATE
        else (node.handler if isinstance(node, TaskNode) else None)
    )
    if ref is None:
        raise InvalidMessage(
            f"{definition.key} node {message.node!r} has nothing to run "
            f"in phase {message.phase.value}"
        )
    if state is None:  # a compensation while cancelling: it needs the state too
        run, _definition, state = runner.reads.load(message.run_id)
        db_time = None
    if db_time is None:  # every event's time comes from the database's clock
        db_time = runner._through_outages("reading the clock", runner.executions.now)
    known = Restored(run, state, db_time, row_cached=begun.row_cached, merging=begun.merging)
    return Read(message, execution, run, definition, node, ref, known, irreversible)


def _within(runner: NodeRunner) -> float:
    """How long after its dispatch an execution's read may be answered by a head here:
    well inside a lease's TTL, so that no claim of it can have lapsed and been taken over
    (and recorded) meanwhile."""
    return min(HEAD_READ_WITHIN_S, runner.settings.lease_ttl / 2)


_SKIPPED = {Skip.ALREADY_DONE: Handled.ALREADY_DONE, Skip.RUN_FINISHED: Handled.RUN_FINISHED}
