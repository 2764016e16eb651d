"""Why a run is not simply running: what each waiting execution waits for — a retry
timer, a person, a signal, a child run, a cancel — as data (:func:`awaiting`, for
``cairn waiting``) and in words (:func:`waiting_lines`, for ``cairn status``); and what
it has spent of its budget, which runs it is linked to, and the anomalies it was caught
in (:func:`context_lines`)."""

from __future__ import annotations

from cairn.decider.budget import run_limits
from cairn.engine.awaiting import awaiting, due_at
from cairn.model.definition import WorkflowDefinition
from cairn.model.durations import format_duration
from cairn.model.state import RunState, TimerKind
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.observe.waits import describe, in_words


def waiting_lines(
    definition: WorkflowDefinition, state: RunState, now: float, *, payloads: bool = True
) -> list[str]:
    """``payloads`` False: without the errors' messages (they quote what failed)."""
    lines = []
    for current in state.nodes.values():
        if current.status is NodeStatus.RETRYING:
            attempts = definition.nodes[current.node].retry.attempts
            due = due_at(state, TimerKind.RETRY, current.node)
            when = "" if due is None else f", next in {in_words(due - now)}"
            error = f": {current.error}" if payloads else ""
            lines.append(
                f"{current.node}#{current.iteration}: retrying (attempt "
                f"{current.attempt + 1}/{attempts}{when}) after {current.error_class} "
                f"error{error}"
            )
        elif current.child is not None and current.active:
            lines.append(
                f"{current.node}#{current.iteration}: running as child run {current.child}"
            )
    lines.extend(describe(entry, now) for entry in awaiting(definition, state))
    if state.status is RunStatus.CANCELLING and state.cancel:
        by = f" by {state.cancel['actor']}" if state.cancel.get("actor") else ""
        lines.append(
            f"cancelling{by}: {state.cancel.get('reason')}; waiting for "
            f"{len(state.active_nodes)} running node(s) to stop (or "
            f"{format_duration(definition.cancel_timeout)} after the request, detached)"
        )
    return lines


def context_lines(
    definition: WorkflowDefinition, state: RunState, *, payloads: bool = True
) -> list[str]:
    """The run's spending against its budget, its parent run if it is a child, and its
    anomalies (``payloads`` False: without their scenes and details)."""
    lines = []
    limits = run_limits(definition, state)
    units = sorted(set(state.spent) | set(limits))
    if units:
        spent = ", ".join(
            f"{state.spent.get(unit, 0.0):g}"
            + (f" of {limits[unit]:g}" if unit in limits else "")
            + f" {unit}"
            for unit in units
        )
        lines.append(f"spent: {spent}")
    parent = state.parent
    if parent:
        lines.append(
            f"child of run {parent['run_id']} (node {parent['node']}#{parent['iteration']}, "
            f"correlation {parent['correlation_id']})"
        )
    lines.extend(anomaly_lines(state, payloads=payloads))
    return lines


def anomaly_lines(state: RunState, *, payloads: bool = True) -> list[str]:
    """Each anomaly the run was caught in, what was done, and (for the one that stopped
    it) the scene: the last moves with their state fingerprints, tool calls, and the
    changes of the watched fields (``payloads`` False: neither the detail nor the scene)."""
    lines = []
    for record in state.anomalies:
        detail = f": {record['detail']}" if payloads else ""
        lines.append(
            f"anomaly {record['kind']} at {record['node']}#{record['iteration']}: "
            f"{record['action']}{detail}"
        )
    stopped = [r for r in state.anomalies if r["action"] != "intervened"]
    if stopped and payloads:
        scene = stopped[-1].get("scene") or {}
        moves = " -> ".join(f"{node}@{fp[:8]}" for node, fp in scene.get("moves", []))
        if moves:
            lines.append(f"  moves: {moves}")
        if scene.get("tools"):
            lines.append(f"  tool calls: {' -> '.join(scene['tools'])}")
        for name, changes in (scene.get("transitions") or {}).items():
            lines.append(f"  {name}: {' -> '.join(value for _step, value in changes)}")
    return lines
