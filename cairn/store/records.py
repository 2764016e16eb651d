"""The store's values, the same from every backend: typed records of its rows (a run, an
execution, an event, an effect, a snapshot), the fleet's gauges, what recording an intent
came to; timestamps in and out of the database, and snapshot encoding. No SQL here: what
the store hands out is plain data, whatever database it came from."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from cairn import clock
from cairn.errors import StoreError
from cairn.model.effects import EffectStatus
from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import StepWrites
from cairn.model.statuses import ExecutionStatus, RunStatus
from cairn.model.workflow_names import DEFAULT_NAMESPACE, qualified


class Intent(StrEnum):
    """What recording an effect's intent came to (:meth:`Tx.record_intent`)."""

    RECORDED = "recorded"  # a new intent: the call may be made
    KNOWN = "known"  # the key is in the ledger already
    FENCED = "fenced"  # refused: a newer claim of the execution is on record


def utcnow() -> datetime:
    return clock.utcnow()


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_epoch(stamp: datetime) -> float:
    """Seconds since the epoch; SQLite hands back stored UTC times without a zone."""
    return (stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)).timestamp()


def spec_digest(spec: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Snapshot:
    seq: int
    format: int
    state: dict[str, Any]


@dataclass(frozen=True)
class FleetGauges:
    """Counts by status, and each backlog as (rows, the oldest one's time or None)."""

    runs: Mapping[str, int]
    effects: Mapping[str, int]
    held_executions: int
    unsent: tuple[int, float | None]  # outbox messages not yet published
    due_timers: tuple[int, float | None]  # timers due and not fired (oldest: its due time)
    inbox: tuple[int, float | None]
    notifications: tuple[int, float | None]  # webhooks not delivered nor given up


def encode_snapshot(state_json: str, compress_over_bytes: int) -> tuple[str, bytes]:
    body = state_json.encode()
    if len(body) > compress_over_bytes:
        return "json+zlib", zlib.compress(body, 6)
    return "json", body


def decode_snapshot(codec: str, body: bytes) -> dict[str, Any]:
    if codec == "json+zlib":
        body = zlib.decompress(body)
    elif codec != "json":
        raise StoreError(f"unknown snapshot codec {codec!r}")
    data: dict[str, Any] = json.loads(body)
    return data


# Each record below is built (``of``) from any row that has its columns as attributes —
# SQLAlchemy's rows and psycopg's named tuples both do — extra columns ignored; a test
# (tests/unit/test_records.py) holds each full record to its table's columns.


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run's row: what it runs, where it is, and its state as of ``last_seq`` (None
    when too large to cache)."""

    id: str
    namespace: str
    workflow: str
    version: int
    status: RunStatus
    input: dict[str, Any]
    request_id: str | None
    last_seq: int
    snapshot_seq: int
    snapshot_at: datetime | None
    current: list[str]
    state: dict[str, Any] | None
    reason: str | None
    parent_run_id: str | None
    fork_seq: int | None
    webhook_url: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    priority: int = 0
    # Whose definition it runs: its own namespace's, or the one that shared it.
    workflow_namespace: str = DEFAULT_NAMESPACE
    build: str | None = None  # the build it started on (docs/versions.md)
    # The seqs its last branch merges went from and to (cairn.engine.merges).
    merged_from: int | None = None
    merged_to: int | None = None

    @property
    def workflow_ref(self) -> str:
        """Its workflow as the registry and node messages name it (``acme/checkout``)."""
        return qualified(self.workflow_namespace, self.workflow)

    @classmethod
    def of(cls, row: Any) -> RunRecord:
        return cls(
            row.id,
            row.namespace,
            row.workflow,
            row.version,
            RunStatus(row.status),
            row.input,
            row.request_id,
            row.last_seq,
            row.snapshot_seq,
            row.snapshot_at,
            row.current,
            row.state,
            row.reason,
            row.parent_run_id,
            row.fork_seq,
            row.webhook_url,
            row.created_at,
            row.updated_at,
            row.finished_at,
            row.priority,
            row.workflow_namespace,
            # The step's constant SQL reads the columns it names, which may not have it.
            getattr(row, "build", None),
            getattr(row, "merged_from", None),
            getattr(row, "merged_to", None),
        )


@dataclass(frozen=True, slots=True)
class ListedRun:
    """A run as a listing shows it: no input, no cached state."""

    id: str
    workflow: str
    version: int
    status: RunStatus
    request_id: str | None
    current: list[str]
    reason: str | None
    last_seq: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: Any) -> ListedRun:
        return cls(
            row.id,
            row.workflow,
            row.version,
            RunStatus(row.status),
            row.request_id,
            row.current,
            row.reason,
            row.last_seq,
            row.created_at,
            row.updated_at,
        )

    def to_summary(self) -> dict[str, Any]:
        """The listing's JSON form: ``GET /v1/runs``'s run (times as epoch seconds)."""
        return {
            "id": self.id,
            "workflow": self.workflow,
            "version": self.version,
            "status": self.status.value,
            "request_id": self.request_id,
            "current": list(self.current or []),
            "reason": self.reason,
            "last_seq": self.last_seq,
            "created_at": to_epoch(self.created_at),
            "updated_at": to_epoch(self.updated_at),
        }


@dataclass(frozen=True, slots=True)
class RunHead:
    """What a progress stream polls: where a run is, without its state."""

    namespace: str
    status: RunStatus
    last_seq: int
    current: list[str]

    @classmethod
    def of(cls, row: Any) -> RunHead:
        return cls(row.namespace, RunStatus(row.status), row.last_seq, row.current)


@dataclass(frozen=True, slots=True)
class RequestedRun:
    """A run a request id already started: what a repeated submit is compared with."""

    id: str
    workflow: str
    version: int
    input: dict[str, Any]
    request_id: str
    webhook_url: str | None
    workflow_namespace: str = DEFAULT_NAMESPACE

    @classmethod
    def of(cls, row: Any) -> RequestedRun:
        return cls(
            row.id,
            row.workflow,
            row.version,
            row.input,
            row.request_id,
            row.webhook_url,
            row.workflow_namespace,
        )


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """A row of the idempotency table: one execution of a node (its iteration and phase),
    its attempt, its newest claim's fence, and its first recorded result."""

    run_id: str
    node: str
    iteration: int
    phase: str
    status: ExecutionStatus
    attempt: int
    worker: str | None
    dispatched_at: datetime
    finished_at: datetime | None
    duration_s: float | None
    result: dict[str, Any] | None
    error_class: str | None
    error: str | None
    recoveries: int
    fence: int

    @classmethod
    def of(cls, row: Any) -> ExecutionRecord:
        return cls(
            row.run_id,
            row.node,
            row.iteration,
            row.phase,
            ExecutionStatus(row.status),
            row.attempt,
            row.worker,
            row.dispatched_at,
            row.finished_at,
            row.duration_s,
            row.result,
            row.error_class,
            row.error,
            row.recoveries,
            row.fence,
        )

    @property
    def key(self) -> ExecutionKey:
        return ExecutionKey(self.run_id, self.node, self.iteration, self.phase)


@dataclass(frozen=True, slots=True)
class ExecutionHead:
    """What a worker checks of an execution before running it (read with its run), and
    the database's clock at that read when the backend reads it in the same statement."""

    status: ExecutionStatus
    attempt: int
    fence: int
    recoveries: int
    db_now: float | None

    @classmethod
    def of(cls, row: Any) -> ExecutionHead:
        """From a row whose execution columns are prefixed ``execution_`` (it also holds
        the run's)."""
        return cls(
            ExecutionStatus(row.execution_status),
            row.execution_attempt,
            row.execution_fence,
            row.execution_recoveries,
            getattr(row, "db_now", None),
        )


@dataclass(frozen=True, slots=True)
class StepCompletion:
    """What a one-statement completion did (:meth:`cairn.store.steps.StepsTx.complete_step`):
    whether the run was still at the seq the step was planned on (``checked``) and the
    result was recorded (``finished``) — nothing is written unless both hold — the outbox
    id of each dispatch by (node, iteration, phase), and, for a run that had moved, the
    run as it is now and the database's clock (``moved``; None where the backend does not
    read it in the same statement)."""

    checked: bool
    finished: bool
    outbox_ids: dict[tuple[str, int, str], int]
    moved: tuple[RunRecord, float] | None = None


def outbox_ids(writes: StepWrites, ids: Sequence[int]) -> dict[tuple[str, int, str], int]:
    """The outbox id of each of a step's dispatches by (node, iteration, phase), from the
    ids its writes returned, in the dispatches' order."""
    return {
        (key.node, key.iteration, key.phase): outbox_id
        for (key, _attempt, _payload), outbox_id in zip(writes.dispatches, ids, strict=True)
    }


@dataclass(frozen=True, slots=True)
class ExecutionClaim:
    """A claim PostgreSQL recorded, with the execution's recovery count as of that write:
    newer than the worker's read before it, so a recovery the scheduler counted in
    between is seen."""

    recoveries: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An entry of a run's log: the decider's input, and what deciding it did."""

    seq: int
    type: str
    data: dict[str, Any]
    outcome: dict[str, Any]
    at: float

    @classmethod
    def of(cls, row: Any) -> EventRecord:
        return cls(row.seq, row.type, row.data, row.outcome, row.at)


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """An effects-ledger row: one side effect by its key, who made it under which claim,
    and what is known of its outcome."""

    id: int
    namespace: str
    key: str
    name: str
    run_id: str
    node: str
    iteration: int
    attempt: int
    fence: int
    status: EffectStatus
    calls: int
    result: Any
    digest: str | None
    error_class: str | None
    error: str | None
    policy: str
    compensate: str | None
    created_at: datetime
    updated_at: datetime
    applied_at: datetime | None
    checked_at: datetime | None
    resolution: dict[str, Any] | None = None  # what a person recorded about it

    @classmethod
    def of(cls, row: Any) -> EffectRecord:
        return cls(
            row.id,
            row.namespace,
            row.key,
            row.name,
            row.run_id,
            row.node,
            row.iteration,
            row.attempt,
            row.fence,
            EffectStatus(row.status),
            row.calls,
            row.result,
            row.digest,
            row.error_class,
            row.error,
            row.policy,
            row.compensate,
            row.created_at,
            row.updated_at,
            row.applied_at,
            row.checked_at,
            row.resolution,
        )


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """An execution's last checkpoint: its working context (messages, sessions,
    progress, scratch), the ``seq``-th it saved, under which attempt and claim."""

    attempt: int
    fence: int
    seq: int
    context: dict[str, Any]
    saved_at: datetime

    @classmethod
    def of(cls, row: Any, context: dict[str, Any]) -> CheckpointRecord:
        """The newest checkpoint ``row``, with its context folded whole."""
        return cls(row.attempt, row.fence, row.seq, context, row.saved_at)


@dataclass(frozen=True, slots=True)
class ModelCallRecord:
    """A model call an execution made, as recorded when it completed: the request by
    reference (``messages``: the digests of what it sent) and the response."""

    run_id: str
    node: str
    iteration: int
    phase: str
    call_index: int
    attempt: int
    fence: int
    provider: str
    operation: str
    model: str | None
    params: dict[str, Any]
    messages: list[str]
    response: dict[str, Any]
    usage: dict[str, Any] | None
    latency_s: float
    recorded_at: datetime
    # The digests of the whole conversation the handler passed, when what was sent
    # (``messages``) was compacted to fit the node's context budget.
    history: list[str] | None = None

    @classmethod
    def of(cls, row: Any) -> ModelCallRecord:
        return cls(
            row.run_id,
            row.node,
            row.iteration,
            row.phase,
            row.call_index,
            row.attempt,
            row.fence,
            row.provider,
            row.operation,
            row.model,
            row.params,
            row.messages,
            row.response,
            row.usage,
            row.latency_s,
            row.recorded_at,
            row.history,
        )


@dataclass(frozen=True, slots=True)
class ParkedExecution:
    """An execution woken from waiting for a slot: what it takes to publish it again."""

    run_id: str
    workflow: str
    version: int
    node: str
    iteration: int
    phase: str
    attempt: int
    queue: str | None = None  # the broker queue it goes to (None: the default)
    namespace: str | None = None  # its run's: for the broker's fairness bands
    priority: int = 0  # its run's


@dataclass(frozen=True, slots=True)
class WaitingPool:
    """A pool executions wait on: its limit (as the newest waiter declared it), how many
    wait, and since when the oldest has."""

    pool: str
    limit: int
    waiting: int
    oldest: datetime


def _epoch(stamp: datetime | None) -> float | None:
    return None if stamp is None else to_epoch(stamp)


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule's row, its times as epoch seconds."""

    namespace: str
    name: str
    workflow: str
    version: int | None
    cron: str
    timezone: str
    input: dict[str, Any]
    overlap: str
    catch_up_s: float
    jitter_s: float
    paused: bool
    ticks_from: float
    next_at: float | None
    buffered_at: float | None
    last_tick_at: float | None
    last_run_id: str | None
    skipped: int
    last_error: str | None
    created_at: float
    updated_at: float
    # What a registered definition last declared (its definition columns); None: by hand.
    declared: dict[str, Any] | None = None

    @classmethod
    def of(cls, row: Any) -> ScheduleRecord:
        return cls(
            row.namespace,
            row.name,
            row.workflow,
            row.version,
            row.cron,
            row.timezone,
            dict(row.input),
            row.overlap,
            float(row.catch_up_s),
            float(row.jitter_s),
            bool(row.paused),
            to_epoch(row.ticks_from),
            _epoch(row.next_at),
            _epoch(row.buffered_at),
            _epoch(row.last_tick_at),
            row.last_run_id,
            int(row.skipped),
            row.last_error,
            to_epoch(row.created_at),
            to_epoch(row.updated_at),
            None if row.declared is None else dict(row.declared),
        )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class DebounceRecord:
    """A debounce key's pending run, and when it starts."""

    namespace: str
    key: str
    run_id: str
    workflow: str
    version: int
    first_at: float
    due_at: float
    deadline_at: float | None
    submissions: int

    @classmethod
    def of(cls, row: Any) -> DebounceRecord:
        return cls(
            row.namespace,
            row.key,
            row.run_id,
            row.workflow,
            row.version,
            to_epoch(row.first_at),
            to_epoch(row.due_at),
            _epoch(row.deadline_at),
            int(row.submissions),
        )
