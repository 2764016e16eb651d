"""The narrow parts of the engine a worker uses, as ports: each consumer is handed the
one it needs, never the whole :class:`~cairn.engine.orchestrator.Orchestrator` to
reach through for its store. The node runner is handed them together, as
:class:`StepParts`, by the composition root (:func:`cairn.runtime.step_parts`); no
worker module imports the orchestrator (an import contract). The transactions behind
them are the engine's to open (:mod:`cairn.engine.executions`,
:mod:`cairn.engine.node_checkpoints`, :mod:`cairn.engine.code_faults`,
:mod:`cairn.engine.outbox`): no worker module opens one
(``tests/unit/test_worker_transactions.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cairn.engine.executions import Begun, Executions, Skip
from cairn.engine.optimistic import Completion, Keep
from cairn.engine.outbox import SentMarks
from cairn.engine.reads import Restored
from cairn.engine.recovery import RecoveryPolicy
from cairn.model.definition import WorkflowDefinition
from cairn.model.keys import Claim, ExecutionKey
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import RunState
from cairn.store.records import CheckpointRecord, ExecutionClaim


class ExecutionDoor(Protocol):
    """A step's read, the database's clock, its claim and a takeover's count
    (:class:`cairn.engine.executions.Executions`)."""

    def begin(self, message: NodeMessage) -> Begun | Skip: ...
    def begin_here(self, message: NodeMessage, within_s: float) -> Begun | None: ...
    def now(self) -> float: ...
    def claim(
        self, key: ExecutionKey, attempt: int, fence: int, *, first: bool
    ) -> ExecutionClaim | None: ...
    def take_over(self, key: ExecutionKey, attempt: int) -> int | None: ...


class AuditRecord(Protocol):
    """An audit event appended to a run's history (the engine's ``Steps.record``)."""

    def __call__(self, run_id: str, kind: str, data: Mapping[str, Any]) -> int | None: ...


class CheckpointRecords(Protocol):
    """An execution's checkpoints (:class:`cairn.engine.node_checkpoints.NodeCheckpoints`)."""

    def save(
        self,
        key: ExecutionKey,
        attempt: int,
        fence: int,
        context: Mapping[str, Any],
        *,
        base: int,
        claim: Claim | None,
    ) -> int | None: ...
    def checkpoint_of(self, key: ExecutionKey) -> CheckpointRecord | None: ...
    def drop(self, key: ExecutionKey) -> None: ...


class CodeFaultRecords(Protocol):
    """A worker's code faults (:class:`cairn.engine.code_faults.CodeFaultBook`)."""

    def record(
        self, workflow: str, version: int, worker: str, *, fault: str, seen: int
    ) -> None: ...
    def clear(self, workflow: str, version: int, worker: str) -> None: ...


class HeldMessages(Protocol):
    """Where a message for a paused queue goes back to (:class:`cairn.engine.outbox.Outbox`)."""

    def hold(self, message: NodeMessage) -> None: ...


class OutboxPart(HeldMessages, Protocol):
    """The outbox as a step uses it: a message held back, an outbox row marked sent with
    the step's commit, a group's siblings published on their own
    (:class:`cairn.engine.outbox.Outbox`)."""

    sent: SentMarks

    def publish(self, messages: Sequence[NodeMessage], *, group: bool = ...) -> None: ...


class StepCommits(Protocol):
    """A step's result committed, and what its history records besides
    (:class:`cairn.engine.advance.Steps`)."""

    def complete(
        self,
        message: NodeMessage,
        outcome: NodeOutcome,
        worker: str,
        known: Restored | None = ...,
        fence: int = ...,
        *,
        keep: Keep | None = ...,
    ) -> Completion: ...
    def complete_fused(
        self, steps: Sequence[tuple[NodeMessage, NodeOutcome]], worker: str, fence: int
    ) -> Completion: ...
    def record(self, run_id: str, kind: str, data: Mapping[str, Any]) -> int | None: ...
    def record_recovery(self, message: NodeMessage, *, cause: str, recoveries: int) -> None: ...


class RunReads(Protocol):
    """What a step reads of a run besides its own read (:class:`cairn.engine.reads.Reads`)."""

    def load(
        self, run_id: str, upto: int | None = ...
    ) -> tuple[Any, WorkflowDefinition, RunState]: ...
    def fenced_out(self, key: ExecutionKey, fence: int) -> bool: ...
    def stop_requested(self, key: ExecutionKey, attempt: int) -> bool: ...


class PausedQueues(Protocol):
    """Which messages are bound for a paused queue (:class:`cairn.engine.pauses.PauseBook`)."""

    def holds(self, message: NodeMessage) -> bool: ...


@dataclass(frozen=True)
class StepParts:
    """The engine's parts a worker's steps use, built once per process by the
    composition root: the step runs on these and nothing else of the engine."""

    # The door to the executions it runs; its checkpoints, model calls and code faults
    # are parts of it (cairn.engine.executions), and so is the store effects write to.
    executions: Executions
    steps: StepCommits
    reads: RunReads
    pauses: PausedQueues
    outbox: OutboxPart
    # What becomes of an execution a takeover finds lost: the scheduler's policy too.
    recovery: RecoveryPolicy
