"""Why a run is not simply running: one line per execution that waits for something —
a retry timer, a person, a signal, a cancel — in words (``cairn status``)."""

from __future__ import annotations

from cairn.durations import format_duration
from cairn.orchestrator.definition import WaitNode, WorkflowDefinition
from cairn.orchestrator.events import Phase
from cairn.orchestrator.state import RunState, TimerKind
from cairn.orchestrator.statuses import NodeStatus, RunStatus


def waiting_lines(definition: WorkflowDefinition, state: RunState, now: float) -> list[str]:
    lines = []
    for current in state.nodes.values():
        name = f"{current.node}#{current.iteration}"
        if current.status is NodeStatus.RETRYING:
            attempts = definition.nodes[current.node].retry.attempts
            due = _due(state, TimerKind.RETRY, current.node)
            when = "" if due is None else f", next in {_seconds(due - now)}"
            lines.append(
                f"{name}: retrying (attempt {current.attempt + 1}/{attempts}{when}) "
                f"after {current.error_class} error: {current.error}"
            )
        elif current.status is NodeStatus.WAITING:
            node = definition.nodes[current.node]
            signals = ", ".join(sorted(node.signals)) if isinstance(node, WaitNode) else ""
            due = _due(state, TimerKind.WAIT, current.node)
            timeout = "" if due is None else f"; times out in {_seconds(due - now)}"
            lines.append(
                f"{name}: waiting for a signal ({signals}) since "
                f"{_seconds(now - current.first_at)}{timeout}"
            )
    for current, phase in state.held:
        what = " (compensation)" if phase is Phase.COMPENSATE else ""
        lines.append(
            f"{current.node}#{current.iteration}{what}: held for an operator: {current.error}\n"
            f"  decide with: cairn signal {state.run_id} recovery.retry | recovery.complete "
            "--payload '{\"output\": {...}}' | recovery.fail"
        )
    if state.status is RunStatus.CANCELLING and state.cancel:
        by = f" by {state.cancel['actor']}" if state.cancel.get("actor") else ""
        lines.append(
            f"cancelling{by}: {state.cancel.get('reason')}; waiting for "
            f"{len(state.active_nodes)} running node(s) to stop (or "
            f"{format_duration(definition.cancel_timeout)} after the request, detached)"
        )
    return lines


def _due(state: RunState, kind: TimerKind, node: str) -> float | None:
    return min(
        (t.due_at for t in state.timers.values() if t.kind is kind and t.node == node), default=None
    )


def _seconds(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
