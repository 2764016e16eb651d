"""What a run waits for a person about: a wait node's signal, or an operator's decision
about a held execution — the read model behind ``cairn waiting`` and the API's."""

from __future__ import annotations

from typing import Any

from cairn.model.awaiting import RECOVERY_SIGNALS, Awaiting
from cairn.model.definition import WaitNode, WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.state import RunState, TimerKind
from cairn.model.statuses import NodeStatus


def awaiting(definition: WorkflowDefinition, state: RunState) -> list[Awaiting]:
    found = []
    for current in state.nodes.values():
        node = definition.nodes[current.node]
        if current.status is NodeStatus.WAITING and isinstance(node, WaitNode):
            found.append(
                Awaiting(
                    state.run_id,
                    current.node,
                    current.iteration,
                    Phase.RUN.value,
                    tuple(sorted(node.signals)),
                    current.first_at,
                    due_at(state, TimerKind.WAIT, current.node),
                    approvers=node.approvers,
                    quorum=node.quorum,
                    votes={k: list(v) for k, v in (current.votes or {}).items()},
                    context=context_of(node, state),
                )
            )
    for current, phase in state.held:
        found.append(
            Awaiting(
                state.run_id,
                current.node,
                current.iteration,
                phase.value,
                RECOVERY_SIGNALS,
                state.updated_at or current.first_at,
                reason=current.error,
            )
        )
    return found


def context_of(node: WaitNode, state: RunState) -> dict[str, Any] | None:
    """What ``node`` shows whoever decides it (None: it declares no context): each
    named state field (a dotted path; null where the state has none), the last messages,
    what the run has spent."""
    declared = node.context
    if declared is None:
        return None
    shown: dict[str, Any] = {"fields": {path: _at(state.vars, path) for path in declared.fields}}
    if declared.messages:
        shown["messages"] = state.messages[-declared.messages :]
    if declared.budget:
        shown["spent"] = dict(state.spent)
    return shown


def _at(values: Any, path: str) -> Any:
    for part in path.split("."):
        values = values.get(part) if isinstance(values, dict) else None
    return values


def due_at(state: RunState, kind: TimerKind, node: str) -> float | None:
    """When the run's first timer of ``kind`` for ``node`` is due, if one is armed."""
    return min(
        (t.due_at for t in state.timers.values() if t.kind is kind and t.node == node),
        default=None,
    )
