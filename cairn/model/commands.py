"""What the decider asks the outside world to do. Executing them is the store's and the
workers' job; deciding them is only the decider's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.model.events import Phase
from cairn.model.statuses import NodeStatus, RunStatus


class Command:
    """Base of every command."""


@dataclass(frozen=True)
class Dispatch(Command):
    """Run ``node`` (its handler, or its compensation) as execution (iteration, attempt)."""

    node: str
    iteration: int
    attempt: int
    phase: Phase = Phase.RUN
    # Run again after an interruption (an operator's retry of a held node): the
    # workflow's on_resume check runs first.
    resumed: bool = False


@dataclass(frozen=True)
class HoldExecution(Command):
    """Mark the execution held in the idempotency table: recovery leaves it alone."""

    node: str
    iteration: int
    attempt: int
    phase: Phase


@dataclass(frozen=True)
class SettleExecution(Command):
    """An operator settled a held execution (or the run ended around it): its row gets
    the outcome a worker would have written."""

    node: str
    iteration: int
    phase: Phase
    status: NodeStatus
    result: Mapping[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class CancelNode(Command):
    """Ask the worker running this execution to stop at its next safe point."""

    node: str
    iteration: int
    attempt: int
    reason: str


@dataclass(frozen=True)
class DetachNode(Command):
    """A node that did not stop in time is left to finish unobserved; reconcile its effects."""

    node: str
    iteration: int
    attempt: int


@dataclass(frozen=True)
class ArmTimer(Command):
    timer_id: str
    due_at: float


@dataclass(frozen=True)
class DisarmTimer(Command):
    timer_id: str


@dataclass(frozen=True)
class FinishRun(Command):
    status: RunStatus
    reason: str | None


@dataclass(frozen=True)
class StartChild(Command):
    """Start ``workflow`` as a child run executing ``node`` (visit ``iteration``, attempt
    ``attempt``): in the same transaction as the decision, as ``run_id``."""

    node: str
    iteration: int
    attempt: int
    run_id: str
    correlation_id: str
    workflow: str
    version: int | None
    input: Mapping[str, Any]
    budget: Mapping[str, float] | None
    depth: int


@dataclass(frozen=True)
class NotifyParent(Command):
    """This child run ended: deliver ``event`` (a ChildFinished) to its parent run."""

    run_id: str
    event: Mapping[str, Any]


@dataclass(frozen=True)
class ReportAnomaly(Command):
    """The run was caught looping without progress, ping-ponging or oscillating, and
    ``action`` was taken (``intervened``, ``failed``, ``handed_off``): count it and, if
    the run was stopped, alert. The scene is in the run state (``anomalies``)."""

    kind: str
    action: str
    node: str
    detail: str
