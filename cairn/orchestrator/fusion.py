"""``persist: ephemeral``: a node whose result is not a checkpoint of its own.

A pure query (a lookup, a formatting step) costs a commit and a broker round trip like
any step, for a result that is as cheap to compute again as to store. An ephemeral
node's worker decides, in memory, what its result leads to; if that is simply "run this
task next", it runs it too, and both results are committed together — the next node's
result is the checkpoint. A crash before that commit loses the ephemeral result, and
recovery computes it again: that is the trade. Pure, like the decider it asks.
"""

from __future__ import annotations

from dataclasses import replace

from cairn.orchestrator.commands import Dispatch
from cairn.orchestrator.decider import decide
from cairn.orchestrator.definition import PersistKind, TaskNode, WorkflowDefinition
from cairn.orchestrator.engine import NodeOutcome
from cairn.orchestrator.events import Phase
from cairn.orchestrator.messages import NodeMessage
from cairn.orchestrator.state import RunState
from cairn.orchestrator.statuses import NodeStatus, RunStatus

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
    leads to is exactly one plain task to dispatch (no timer, no other command): the
    state after it, and that task's message. None: commit as usual."""
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
    if len(decision.commands) != 1 or not isinstance(decision.commands[0], Dispatch):
        return None
    dispatch = decision.commands[0]
    target = definition.nodes[dispatch.node]
    if (
        dispatch.phase is not Phase.RUN
        or dispatch.resumed
        or not isinstance(target, TaskNode)
        or target.handler is None
        or target.irreversible  # its claim must be recorded before it runs
    ):
        return None
    following = NodeMessage(
        message.run_id,
        message.workflow,
        message.version,
        dispatch.node,
        dispatch.iteration,
        dispatch.attempt,
    )
    return decision.state, following
