"""``persist: ephemeral``: a node whose result is not a checkpoint of its own.

A pure query (a lookup, a formatting step) costs a commit and a broker round trip like
any step, for a result that is as cheap to compute again as to store. An ephemeral
node's worker decides, in memory, what its result leads to; if that is simply "run this
task next", it runs it too, and both results are committed together — the next node's
result is the checkpoint. A crash before that commit loses the ephemeral result, and
recovery computes it again: that is the trade. Pure, like the decider it asks.

Node timeouts do not stop it (every task running a handler has one by default): the
chain runs under the timer of the node it began with, the only one armed while it runs,
so it runs on only into a node whose own timeout is no shorter (or when neither has
one), and that node is stopped no later than its own timer would have stopped it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from cairn.decider.graph import decide
from cairn.decider.step import timer_id
from cairn.model.commands import ArmTimer, Command, DisarmTimer, Dispatch
from cairn.model.definition import PersistKind, TaskNode, WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import RunState, TimerKind
from cairn.model.statuses import NodeStatus, RunStatus

# Consecutive ephemeral nodes run on in one go, up to this many: a loop of them still
# reaches a checkpoint.
MAX_FUSED = 16


def fused_next(
    definition: WorkflowDefinition,
    state: RunState,
    message: NodeMessage,
    outcome: NodeOutcome,
    now: float,
) -> tuple[RunState, NodeMessage] | None:
    """If ``message``'s node is ephemeral and succeeded, and the decision its result
    leads to is exactly one plain task to dispatch (no other command but the node
    timeouts of the two, and no timer the task's own timeout would fire before the
    chain's) on the queue of ``message``'s node (a worker runs only what its queues
    say): the state after it, and that task's message. None: commit as usual."""
    node = definition.nodes[message.node]
    if (
        message.phase is not Phase.RUN
        or outcome.status is not NodeStatus.SUCCEEDED
        or not isinstance(node, TaskNode)
        or node.persist.kind is not PersistKind.EPHEMERAL
    ):
        return None
    decision = decide(definition, state, replace(outcome.event, at=now))
    if decision.ignored or decision.state.status is not RunStatus.RUNNING:
        return None
    dispatches = [c for c in decision.commands if isinstance(c, Dispatch)]
    if len(dispatches) != 1:
        return None
    dispatch = dispatches[0]
    target = definition.nodes[dispatch.node]
    if (
        dispatch.phase is not Phase.RUN
        or dispatch.resumed
        or not isinstance(target, TaskNode)
        or target.handler is None
        or target.irreversible  # its claim must be recorded before it runs
        or not _only_node_timeouts(decision.commands, message, dispatch)
        or not _covered(node.timeout, target.timeout)
        # This worker consumes the chain's queue, not necessarily the next node's.
        or definition.queue_of(dispatch.node) != definition.queue_of(message.node)
    ):
        return None
    following = NodeMessage(
        message.run_id,
        message.workflow,
        message.version,
        dispatch.node,
        dispatch.iteration,
        dispatch.attempt,
        queue=definition.queue_of(dispatch.node),
        priority=message.priority,
        namespace=message.namespace,
    )
    return decision.state, following


def _only_node_timeouts(
    commands: tuple[Command, ...], message: NodeMessage, dispatch: Dispatch
) -> bool:
    """Whether the commands besides the dispatch only disarm the finished node's timeout
    and arm the dispatched node's (the engine writes both when it commits the chain)."""
    finished = timer_id(TimerKind.NODE_TIMEOUT, message.node, message.iteration, message.attempt)
    started = timer_id(TimerKind.NODE_TIMEOUT, dispatch.node, dispatch.iteration, dispatch.attempt)
    return all(
        command is dispatch
        or (isinstance(command, DisarmTimer) and command.timer_id == finished)
        or (isinstance(command, ArmTimer) and command.timer_id == started)
        for command in commands
    )


def _covered(chain: timedelta | None, own: timedelta | None) -> bool:
    """Whether a node with timeout ``own`` may run under the timer of a chain whose
    links all had timeouts of at least ``chain`` (or none, all of them): it then stops
    no later than its own timer would have stopped it, and a node without a timeout is
    never stopped by another's."""
    if chain is None or own is None:
        return chain is None and own is None
    return chain <= own
