"""What an execution came to, and what a decision writes: the values that cross from
the worker to the engine and from the engine to the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.model.events import Event
from cairn.model.keys import ExecutionKey
from cairn.model.statuses import NodeStatus


@dataclass(frozen=True)
class NodeOutcome:
    """The result of one execution, as the worker reports it. The event's time is
    replaced by the database's clock when it is recorded."""

    event: Event
    status: NodeStatus
    result: Mapping[str, Any] | None = None
    error_class: str | None = None
    error: str | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class StepWrites:
    """What one decision writes, whichever path writes it: the run row's new values
    (``run``; its ``last_seq`` is the event's seq), the event and what the decision did,
    a snapshot when due (format, codec, body), the sent-marks this process owes, each
    dispatch as (execution key, attempt, message payload), and the run's timers armed
    (id, due at) and disarmed (ids) — disjoint, the decision's net effect on them."""

    run: Mapping[str, Any]
    event: Mapping[str, Any]
    outcome: Mapping[str, Any]
    sent: Sequence[int]
    dispatches: Sequence[tuple[ExecutionKey, int, Mapping[str, Any]]]
    snapshot: tuple[int, str, bytes] | None = None
    armed: Sequence[tuple[str, float]] = ()
    disarmed: Sequence[str] = ()

    @property
    def seq(self) -> int:
        return int(self.run["last_seq"])

    @property
    def at(self) -> float:
        return float(self.event["at"])
