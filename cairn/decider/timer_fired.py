"""A fired timer: a retry that is due, a wait, node or join that timed out, a cancelling
run's cancel timeout (the nodes that did not stop are detached), or a compensation to try
again. A timer that is no longer armed (fired already, or disarmed) changes nothing."""

from __future__ import annotations

from cairn.decider.moves import Moves
from cairn.model.commands import CancelNode
from cairn.model.definition import ErrorClass, TaskNode, WaitNode
from cairn.model.durations import format_duration
from cairn.model.events import NodeHeld, TimerFired
from cairn.model.state import TimerKind
from cairn.model.statuses import NodeStatus


def timer_fired(step: Moves, event: TimerFired) -> str | None:
    timer = step.state.timers.pop(event.timer_id, None)
    if timer is None:
        return f"timer {event.timer_id!r} is not armed (fired already, or disarmed)"
    if timer.kind is TimerKind.CANCEL:
        step.detach_active()
        return None
    if timer.kind is TimerKind.JOIN_TIMEOUT:
        assert timer.node is not None
        step.join_timed_out(timer.node)
        return None
    if timer.kind is TimerKind.COMPENSATION_RETRY:
        step.compensation_retry_due()
        return None
    assert timer.node is not None
    current = step.state.nodes[timer.node]
    if current.iteration != timer.iteration:  # defensive: timers die with their execution
        return f"timer {timer.timer_id!r} belongs to an earlier visit of {timer.node!r}"
    node = step.definition.nodes[timer.node]
    if timer.kind is TimerKind.RETRY:
        step.schedule(node, current.iteration, current.attempt + 1, current)
    elif timer.kind is TimerKind.WAIT:
        assert isinstance(node, WaitNode)
        step.set_node(current, NodeStatus.TIMED_OUT)
        step.leave_wait(node, node.on_timeout, "timeout")
    elif timer.kind is TimerKind.NODE_TIMEOUT:
        assert node.timeout is not None
        step.commands.append(CancelNode(node.id, current.iteration, current.attempt, "timed out"))
        if isinstance(node, TaskNode) and node.irreversible:
            # It may still finish (a payment on its way): not a failure to retry or
            # fail on, but a decision for a person, as when its worker is lost.
            timed_out = format_duration(node.timeout)
            return step.node_held(
                NodeHeld(
                    at=step.at,
                    node=node.id,
                    iteration=current.iteration,
                    attempt=current.attempt,
                    reason=f"irreversible: timed out after {timed_out}, and it may have "
                    "taken effect",
                )
            )
        step.node_failure(
            node,
            current,
            ErrorClass.TRANSIENT,
            f"timed out after {format_duration(node.timeout)}",
            timed_out=True,
        )
    return None
