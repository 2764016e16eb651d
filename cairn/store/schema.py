"""The tables, as the Alembic migrations (``cairn/store/migrations``, the source of truth)
make them: mirrored here for queries; a test checks that the two never drift apart."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from cairn.model.effects import EffectStatus
from cairn.model.statuses import ExecutionStatus, RunStatus

# JSONB on PostgreSQL (indexable, compact), plain JSON text on SQLite.
Json = JSON().with_variant(JSONB(), "postgresql")
# BIGSERIAL on PostgreSQL; SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")
_PAGED = ("created_at", "id")  # the runs' keyset paging order, newest first
_ENDED = text("finished_at IS NOT NULL")
_FORKS = text("parent_run_id IS NOT NULL")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _known(statuses: Iterable[StrEnum]) -> CheckConstraint:
    """A status column holds only the statuses its state machine has (migration 0011)."""
    listed = ", ".join(f"'{status.value}'" for status in statuses)
    return CheckConstraint(f"status IN ({listed})", name="status")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class WorkflowRow(Base):
    """A namespace's registered definition (migration 0022): immutable once registered."""

    __tablename__ = "workflows"

    # A server default: a process of the release before 0022 registers into ``default``.
    namespace: Mapped[str] = mapped_column(String(100), primary_key=True, server_default="default")
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(Json)
    registered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The definition format it was compiled under (migration 0010): its semantics.
    format: Mapped[int] = mapped_column(Integer, server_default="1")


class WorkflowShareRow(Base):
    """A workflow a namespace's admin shared with another namespace (migration 0022):
    ``grantee`` sees and starts it. ``version`` 0: every version, registered or to come."""

    __tablename__ = "workflow_shares"
    __table_args__ = (Index("ix_workflow_shares_grantee_workflow", "grantee", "workflow"),)

    namespace: Mapped[str] = mapped_column(String(100), primary_key=True)  # the owner's
    workflow: Mapped[str] = mapped_column(String(200), primary_key=True)
    grantee: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(300))


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("namespace", "request_id"),
        _known(RunStatus),
        Index("ix_runs_status_updated_at", "status", "updated_at"),
        # A namespace's runs newest first (0008); by status, workflow or both (0024).
        Index("ix_runs_namespace_created_at_id", "namespace", *_PAGED),
        Index("ix_runs_listing_status", "namespace", "status", *_PAGED),
        Index("ix_runs_listing_workflow", "namespace", "workflow", *_PAGED),
        Index("ix_runs_listing_workflow_status", "namespace", "workflow", "status", *_PAGED),
        # Retention: the runs that ended before a cutoff.
        Index("ix_runs_finished_at", "finished_at", postgresql_where=_ENDED, sqlite_where=_ENDED),
        # A run's forks, oldest first (0025): the few runs with a parent.
        Index(
            "ix_runs_forks",
            "parent_run_id",
            "created_at",
            postgresql_where=_FORKS,
            sqlite_where=_FORKS,
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(100), server_default="default")
    workflow: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    input: Mapped[dict[str, Any]] = mapped_column(Json)
    request_id: Mapped[str | None] = mapped_column(String(200))
    last_seq: Mapped[int] = mapped_column(Integer, server_default="0")
    snapshot_seq: Mapped[int] = mapped_column(Integer, server_default="0")
    snapshot_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    current: Mapped[list[str]] = mapped_column(Json)  # active node executions, for display
    # The state as of last_seq (see migration 0002); None when too large to cache.
    state: Mapped[dict[str, Any] | None] = mapped_column(Json)
    reason: Mapped[str | None] = mapped_column(Text)
    parent_run_id: Mapped[str | None] = mapped_column(String(36))
    fork_seq: Mapped[int | None] = mapped_column(Integer)
    # Where the run's notifications go (migration 0009); None: nowhere.
    webhook_url: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Who gets the next free slot and the next worker first, -5..5 (migration 0018).
    priority: Mapped[int] = mapped_column(Integer, server_default="0")
    # The namespace whose definition it runs (migration 0022): its own, or the one that
    # shared the workflow with it.
    workflow_namespace: Mapped[str] = mapped_column(String(100), server_default="default")


class EventRow(Base):
    """The append-only log: the decider's inputs, with what each decision did."""

    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36))
    seq: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(50))
    data: Mapped[dict[str, Any]] = mapped_column(Json)
    outcome: Mapped[dict[str, Any]] = mapped_column(Json)
    at: Mapped[float] = mapped_column(Float)


class SnapshotRow(Base):
    __tablename__ = "snapshots"

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    format: Mapped[int] = mapped_column(Integer)
    codec: Mapped[str] = mapped_column(String(20))  # "json" or "json+zlib"
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class NodeExecutionRow(Base):
    """The idempotency table: one row per (run, node, iteration, phase); the first
    result recorded for a key is the result."""

    __tablename__ = "node_executions"
    __table_args__ = (
        _known(ExecutionStatus),
        Index("ix_node_executions_status_dispatched_at", "status", "dispatched_at"),
    )

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    iteration: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(20), primary_key=True)
    status: Mapped[str] = mapped_column(String(20))
    attempt: Mapped[int] = mapped_column(Integer)
    worker: Mapped[str | None] = mapped_column(String(200))
    dispatched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    duration_s: Mapped[float | None] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(Json)
    error_class: Mapped[str | None] = mapped_column(String(20))
    error: Mapped[str | None] = mapped_column(Text)
    recoveries: Mapped[int] = mapped_column(Integer, server_default="0")
    # The fence of the newest claim recorded here (0: none): takeovers, and every claim
    # of an irreversible node.
    fence: Mapped[int] = mapped_column(Integer, server_default="0")


class NodeCheckpointRow(Base):
    """A long execution's working context, saved while it runs (migration 0012): what a
    re-execution resumes from. ``seq`` counts the execution's checkpoints."""

    __tablename__ = "node_checkpoints"

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    iteration: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(20), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    fence: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    context: Mapped[dict[str, Any]] = mapped_column(Json)
    saved_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ModelMessageRow(Base):
    """A message some model call sent, stored once by its content's digest (migration
    0013): calls name the digests of their messages."""

    __tablename__ = "model_messages"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[Any] = mapped_column(Json)  # a message, or a Responses API input string
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ModelCallRow(Base):
    """A model call an execution made (its ``call_index``-th), recorded as it completed:
    the request by reference (``messages``: digests), the response, usage, latency."""

    __tablename__ = "model_calls"

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    iteration: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(20), primary_key=True)
    call_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    fence: Mapped[int] = mapped_column(Integer)
    provider: Mapped[str] = mapped_column(String(40))
    operation: Mapped[str] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(200))
    params: Mapped[dict[str, Any]] = mapped_column(Json)
    messages: Mapped[list[str]] = mapped_column(Json)
    response: Mapped[dict[str, Any]] = mapped_column(Json)
    usage: Mapped[dict[str, Any] | None] = mapped_column(Json)
    latency_s: Mapped[float] = mapped_column(Float)
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # What the handler passed, when a context budget compacted what was sent (0014).
    history: Mapped[Any] = mapped_column(Json, nullable=True)


class SlotWaitRow(Base):
    """An execution waiting for a concurrency slot of ``pool`` (migration 0015): parked,
    holding nothing, until a slot frees and it is published again."""

    __tablename__ = "slot_waits"
    __table_args__ = (Index("ix_slot_waits_pool_order", "pool", "priority", "waiting_since"),)

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    iteration: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(20), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    namespace: Mapped[str] = mapped_column(String(100))
    pool: Mapped[str] = mapped_column(String(400))
    pool_limit: Mapped[int] = mapped_column(Integer)
    priority: Mapped[int] = mapped_column(Integer, server_default="0")
    waiting_since: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Published again at this time: on its way to a worker, holding its place.
    woken_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The broker queue its message goes to when woken (None: the default queue).
    queue: Mapped[str | None] = mapped_column(String(64))


class OutboxRow(Base):
    """Messages committed with the decision that caused them, published after commit."""

    __tablename__ = "outbox"
    __table_args__ = (
        Index(
            "ix_outbox_unsent",
            "created_at",
            postgresql_where=text("sent_at IS NULL"),
            sqlite_where=text("sent_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36))
    topic: Mapped[str] = mapped_column(String(50))
    payload: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    publishes: Mapped[int] = mapped_column(Integer, server_default="0")


class InboxRow(Base):
    """Events for a run from another run (a child's end, a parent's cancel), committed
    with the decision that caused them and applied in a transaction of their own."""

    __tablename__ = "inbox"
    __table_args__ = (Index("ix_inbox_created_at", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36))
    event: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class NotificationRow(Base):
    """A webhook notification, written with the decision it reports and delivered by the
    scheduler's notifier until the receiver takes it (see migration 0009)."""

    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("event_id"),
        Index(
            "ix_notifications_due",
            "due_at",
            postgresql_where=text("delivered_at IS NULL AND given_up_at IS NULL"),
            sqlite_where=text("delivered_at IS NULL AND given_up_at IS NULL"),
        ),
        Index("ix_notifications_run_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(100))
    run_id: Mapped[str] = mapped_column(String(36))
    namespace: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(40))
    url: Mapped[str] = mapped_column(Text)
    body: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    due_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    given_up_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)


class EffectRow(Base):
    """The effects ledger: each external side effect by its business key — the intent
    recorded before the call, the outcome after (see migration 0006)."""

    __tablename__ = "effects"
    __table_args__ = (
        UniqueConstraint("namespace", "key"),
        _known(EffectStatus),
        Index("ix_effects_status_updated_at", "status", "updated_at"),
        Index("ix_effects_run_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(100))
    key: Mapped[str] = mapped_column(String(500))
    name: Mapped[str] = mapped_column(String(200))  # the effect type: its adapter's name
    run_id: Mapped[str] = mapped_column(String(36))
    node: Mapped[str] = mapped_column(String(200))
    iteration: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    # The fencing token of the claim that last called (or resolved) it.
    fence: Mapped[int] = mapped_column(Integer, server_default="0")
    status: Mapped[str] = mapped_column(String(20))
    calls: Mapped[int] = mapped_column(Integer, server_default="0")
    result: Mapped[Any | None] = mapped_column(Json)
    digest: Mapped[str | None] = mapped_column(String(64))
    error_class: Mapped[str | None] = mapped_column(String(20))
    error: Mapped[str | None] = mapped_column(Text)
    # What the reconciler does when the ledger says applied and the world says absent.
    policy: Mapped[str] = mapped_column(String(20), server_default="flag")
    compensate: Mapped[str | None] = mapped_column(String(300))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # What a person recorded about it (migration 0020): outcome, note, by, at, was.
    resolution: Mapped[Any | None] = mapped_column(Json)


class TimerRow(Base):
    """Durable timers: retries, wait timeouts, node and join timeouts, cancel timeouts."""

    __tablename__ = "timers"
    __table_args__ = (
        Index(
            "ix_timers_due",
            "due_at",
            postgresql_where=text("fired_at IS NULL"),
            sqlite_where=text("fired_at IS NULL"),
        ),
    )

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    timer_id: Mapped[str] = mapped_column(String(300), primary_key=True)
    due_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    fired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ArtifactRow(Base):
    """An artifact's registration: its content lives in the object store under its
    sha256; this row says which run made it, where, from what, and which version of
    its name it is (see migration 0007 and :mod:`cairn.artifacts`)."""

    __tablename__ = "artifacts"
    __table_args__ = (
        UniqueConstraint("run_id", "name", "version"),
        # A node that runs again (a retry, a recovery) and puts the same content under the
        # same name gets the registration it made before, not a new version.
        UniqueConstraint("run_id", "node", "iteration", "name", "sha256"),
        Index("ix_artifacts_sha256", "sha256"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    uri: Mapped[str] = mapped_column(Text)
    node: Mapped[str] = mapped_column(String(200))
    iteration: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(20))
    call_id: Mapped[str] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(200))
    tool: Mapped[str | None] = mapped_column(String(200))
    params: Mapped[dict[str, Any] | None] = mapped_column(Json)
    meta: Mapped[dict[str, Any] | None] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ScheduleRow(Base):
    """A cron schedule (migration 0016): what it starts, when, and where its ticks stand.
    Each tick's run has a request id derived from the tick (started once, however many
    schedulers look)."""

    __tablename__ = "schedules"
    __table_args__ = (
        CheckConstraint(
            "overlap IN ('skip', 'buffer_one', 'cancel_running', 'allow')", name="overlap"
        ),
        Index("ix_schedules_next_at", "next_at"),
    )

    namespace: Mapped[str] = mapped_column(String(100), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    workflow: Mapped[str] = mapped_column(String(200))
    version: Mapped[int | None] = mapped_column(Integer)  # None: the newest at each tick
    cron: Mapped[str] = mapped_column(String(200))
    timezone: Mapped[str] = mapped_column(String(64))
    input: Mapped[dict[str, Any]] = mapped_column(Json)
    overlap: Mapped[str] = mapped_column(String(20))
    catch_up_s: Mapped[float] = mapped_column(Float)
    jitter_s: Mapped[float] = mapped_column(Float)
    paused: Mapped[bool] = mapped_column(Boolean)
    ticks_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # When a scheduler should look next; None once the expression has no more ticks.
    next_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    buffered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_tick_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_run_id: Mapped[str | None] = mapped_column(String(36))
    skipped: Mapped[int] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class DebounceRow(Base):
    """A debounce key's pending run and when it starts (0016); taken as the run starts."""

    __tablename__ = "debounces"
    __table_args__ = (Index("ix_debounces_due_at", "due_at"),)

    namespace: Mapped[str] = mapped_column(String(100), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(36))
    workflow: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    first_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    due_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    submissions: Mapped[int] = mapped_column(Integer)


class PauseRow(Base):
    """A workflow's new starts, or a queue's node messages, one namespace holds (0021)."""

    __tablename__ = "pauses"

    namespace: Mapped[str] = mapped_column(String(100), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)  # workflow | queue
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    paused_by: Mapped[str] = mapped_column(String(200))
    paused_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class HeldStartRow(Base):
    """A run submitted while its workflow was paused (0021), started on resume."""

    __tablename__ = "held_starts"
    __table_args__ = (Index("ix_held_starts_workflow", "namespace", "workflow", "held_at"),)

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(100))
    workflow: Mapped[str] = mapped_column(String(200))
    actor: Mapped[str | None] = mapped_column(String(200))
    held_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SingletonRow(Base):
    """The run a singleton key last started (migration 0016): the row submissions lock."""

    __tablename__ = "singletons"

    namespace: Mapped[str] = mapped_column(String(100), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(36))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# The tables, for Core statements.
runs = cast(Table, RunRow.__table__)
events = cast(Table, EventRow.__table__)
snapshots = cast(Table, SnapshotRow.__table__)
executions = cast(Table, NodeExecutionRow.__table__)
checkpoints = cast(Table, NodeCheckpointRow.__table__)
model_messages = cast(Table, ModelMessageRow.__table__)
model_calls = cast(Table, ModelCallRow.__table__)
slot_waits = cast(Table, SlotWaitRow.__table__)
outbox = cast(Table, OutboxRow.__table__)
timers = cast(Table, TimerRow.__table__)
inbox = cast(Table, InboxRow.__table__)
effects = cast(Table, EffectRow.__table__)
artifacts = cast(Table, ArtifactRow.__table__)
notifications = cast(Table, NotificationRow.__table__)
workflows = cast(Table, WorkflowRow.__table__)
workflow_shares = cast(Table, WorkflowShareRow.__table__)
schedules = cast(Table, ScheduleRow.__table__)
debounces = cast(Table, DebounceRow.__table__)
singletons = cast(Table, SingletonRow.__table__)
pauses = cast(Table, PauseRow.__table__)
held_starts = cast(Table, HeldStartRow.__table__)

# The access tables — principals, API keys, the audit log, console sessions — are declared
# in schema_access, and what the fleet reports about itself in schema_fleet (this module
# is at its size), imported here, last, so that Base.metadata holds every table whichever
# module is imported first.
from cairn.store import schema_access as _access  # noqa: E402, F401
from cairn.store import schema_fleet as _fleet  # noqa: E402, F401
