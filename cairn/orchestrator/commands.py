"""What the decider asks the outside world to do. Executing them is the store's and the
workers' job; deciding them is only the decider's."""

from __future__ import annotations

from dataclasses import dataclass

from cairn.orchestrator.events import Phase
from cairn.orchestrator.statuses import RunStatus


class Command:
    """Base of every command."""


@dataclass(frozen=True)
class Dispatch(Command):
    """Run ``node`` (its handler, or its compensation) as execution (iteration, attempt)."""

    node: str
    iteration: int
    attempt: int
    phase: Phase = Phase.RUN


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
