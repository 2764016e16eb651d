"""What a run waits for a person about: a wait node's signal, or an operator's decision
about a held execution — the read model behind ``cairn waiting`` and the API's."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cairn.decider.step import RECOVERY_SIGNALS
from cairn.model.definition import WaitNode, WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.state import RunState, TimerKind
from cairn.model.statuses import NodeStatus


@dataclass(frozen=True)
class Awaiting:
    """One execution that waits for a person: a wait node's signal, or an operator's
    decision about a held node."""

    run_id: str
    node: str
    iteration: int
    phase: str
    signals: tuple[str, ...]  # what would answer it
    since: float  # epoch seconds
    times_out_at: float | None = None
    reason: str | None = None  # why a held node is held

    @property
    def held(self) -> bool:
        return self.signals == RECOVERY_SIGNALS

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "signals": list(self.signals), "held": self.held}


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


def due_at(state: RunState, kind: TimerKind, node: str) -> float | None:
    """When the run's first timer of ``kind`` for ``node`` is due, if one is armed."""
    return min(
        (t.due_at for t in state.timers.values() if t.kind is kind and t.node == node),
        default=None,
    )
