"""The tables, as the Alembic migrations (``cairn/store/migrations``, the source of truth)
make them: mirrored here for queries; a test checks that the two never drift apart.

Declared with SQLAlchemy Core, not ORM classes: every statement is Core, and importing the
ORM would add about a tenth to the start-up of every process, quick CLI commands
included. A column is nullable unless it says ``nullable=False`` or is in the primary key."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
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


# Every table, for Alembic's env and the test that compares it with the migrations.
metadata = MetaData(naming_convention=NAMING)


# A namespace's registered definition (migration 0022): immutable once registered.
workflows = Table(
    "workflows",
    metadata,
    # A server default: a process of the release before 0022 registers into ``default``.
    Column("namespace", String(100), primary_key=True, server_default="default"),
    Column("name", String(200), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("digest", String(64), nullable=False),
    Column("spec", Json, nullable=False),
    Column("registered_at", DateTime(timezone=True), nullable=False),
    # The definition format it was compiled under (migration 0010): its semantics.
    Column("format", Integer, nullable=False, server_default="1"),
)


# A workflow a namespace's admin shared with another namespace (migration 0022):
# ``grantee`` sees and starts it. ``version`` 0: every version, registered or to come.
workflow_shares = Table(
    "workflow_shares",
    metadata,
    Column("namespace", String(100), primary_key=True),  # the owner's
    Column("workflow", String(200), primary_key=True),
    Column("grantee", String(100), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("created_by", String(300), nullable=False),
    Index("ix_workflow_shares_grantee_workflow", "grantee", "workflow"),
)


runs = Table(
    "runs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(100), nullable=False, server_default="default"),
    Column("workflow", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("input", Json, nullable=False),
    Column("request_id", String(200)),
    Column("last_seq", Integer, nullable=False, server_default="0"),
    Column("snapshot_seq", Integer, nullable=False, server_default="0"),
    Column("snapshot_at", DateTime(timezone=True)),
    Column("current", Json, nullable=False),  # active node executions, for display
    # The state as of last_seq (see migration 0002); None when too large to cache.
    Column("state", Json),
    Column("reason", Text),
    Column("parent_run_id", String(36)),
    Column("fork_seq", Integer),
    # Where the run's notifications go (migration 0009); None: nowhere.
    Column("webhook_url", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    # Who gets the next free slot and the next worker first, -5..5 (migration 0018).
    Column("priority", Integer, nullable=False, server_default="0"),
    # The namespace whose definition it runs (migration 0022): its own, or the one that
    # shared the workflow with it.
    Column("workflow_namespace", String(100), nullable=False, server_default="default"),
    # The build it started on (migration 0029); None: not routed by build.
    Column("build", String(64)),
    # The run's last steps that were branch successes merged onto it (migration 0031):
    # from the seq they merged onto to the last of them. None, or behind last_seq: the
    # run's last step was of another kind.
    Column("merged_from", Integer),
    Column("merged_to", Integer),
    UniqueConstraint("namespace", "request_id"),
    _known(RunStatus),
    # The runs of a status (0030). Nothing a step changes is indexed — not updated_at —
    # so PostgreSQL updates a run's row in place (heap-only) at each step.
    Index("ix_runs_status_created_at", "status", "created_at"),
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


# The append-only log: the decider's inputs, with what each decision did.
events = Table(
    "events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", String(36), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", String(50), nullable=False),
    Column("data", Json, nullable=False),
    Column("outcome", Json, nullable=False),
    Column("at", Float, nullable=False),
    UniqueConstraint("run_id", "seq"),
)


snapshots = Table(
    "snapshots",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("format", Integer, nullable=False),
    Column("codec", String(20), nullable=False),  # "json" or "json+zlib"
    Column("body", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


# The idempotency table: one row per (run, node, iteration, phase); the first
# result recorded for a key is the result.
executions = Table(
    "node_executions",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("node", String(200), primary_key=True),
    Column("iteration", Integer, primary_key=True),
    Column("phase", String(20), primary_key=True),
    Column("status", String(20), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("worker", String(200)),
    Column("dispatched_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("duration_s", Float),
    Column("result", Json),
    Column("error_class", String(20)),
    Column("error", Text),
    Column("recoveries", Integer, nullable=False, server_default="0"),
    # The fence of the newest claim recorded here (0: none): takeovers, and every claim
    # of an irreversible node.
    Column("fence", Integer, nullable=False, server_default="0"),
    _known(ExecutionStatus),
    Index("ix_node_executions_status_dispatched_at", "status", "dispatched_at"),
)


# A long execution's working context, saved while it runs (migration 0012): what a
# re-execution resumes from. ``seq`` counts the execution's checkpoints, a row each
# (0027): the whole context (``base`` 0), or what changed since checkpoint ``base``.
checkpoints = Table(
    "node_checkpoints",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("node", String(200), primary_key=True),
    Column("iteration", Integer, primary_key=True),
    Column("phase", String(20), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("fence", Integer, nullable=False),
    Column("seq", Integer, primary_key=True),
    Column("base", Integer, nullable=False, server_default="0"),
    Column("context", Json, nullable=False),
    Column("saved_at", DateTime(timezone=True), nullable=False),
)


# A message some model call sent, stored once by its content's digest (migration
# 0013): calls name the digests of their messages.
model_messages = Table(
    "model_messages",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("body", Json, nullable=False),  # a message, or a Responses API input string
    Column("created_at", DateTime(timezone=True), nullable=False),
)


# A model call an execution made (its ``call_index``-th), recorded as it completed:
# the request by reference (``messages``: digests), the response, usage, latency.
model_calls = Table(
    "model_calls",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("node", String(200), primary_key=True),
    Column("iteration", Integer, primary_key=True),
    Column("phase", String(20), primary_key=True),
    Column("call_index", Integer, primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("fence", Integer, nullable=False),
    Column("provider", String(40), nullable=False),
    Column("operation", String(200), nullable=False),
    Column("model", String(200)),
    Column("params", Json, nullable=False),
    Column("messages", Json, nullable=False),
    Column("response", Json, nullable=False),
    Column("usage", Json),
    Column("latency_s", Float, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    # What the handler passed, when a context budget compacted what was sent (0014).
    Column("history", Json),
)


# An execution waiting for a concurrency slot of ``pool`` (migration 0015): parked,
# holding nothing, until a slot frees and it is published again.
slot_waits = Table(
    "slot_waits",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("node", String(200), primary_key=True),
    Column("iteration", Integer, primary_key=True),
    Column("phase", String(20), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("namespace", String(100), nullable=False),
    Column("pool", String(400), nullable=False),
    Column("pool_limit", Integer, nullable=False),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("waiting_since", DateTime(timezone=True), nullable=False),
    # Published again at this time: on its way to a worker, holding its place.
    Column("woken_at", DateTime(timezone=True)),
    # The broker queue its message goes to when woken (None: the default queue).
    Column("queue", String(64)),
    Index("ix_slot_waits_pool_order", "pool", "priority", "waiting_since"),
)


# Messages committed with the decision that caused them, published after commit.
outbox = Table(
    "outbox",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", String(36), nullable=False),
    Column("topic", String(50), nullable=False),
    Column("payload", Json, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("sent_at", DateTime(timezone=True)),
    Column("publishes", Integer, nullable=False, server_default="0"),
    Index(
        "ix_outbox_unsent",
        "created_at",
        postgresql_where=text("sent_at IS NULL"),
        sqlite_where=text("sent_at IS NULL"),
    ),
)


# Events for a run from another run (a child's end, a parent's cancel), committed
# with the decision that caused them and applied in a transaction of their own.
inbox = Table(
    "inbox",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", String(36), nullable=False),
    Column("event", Json, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_inbox_created_at", "created_at"),
)


# A webhook notification, written with the decision it reports and delivered by the
# scheduler's notifier until the receiver takes it (see migration 0009).
notifications = Table(
    "notifications",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("event_id", String(100), nullable=False),
    Column("run_id", String(36), nullable=False),
    Column("namespace", String(100), nullable=False),
    Column("kind", String(40), nullable=False),
    Column("url", Text, nullable=False),
    Column("body", Json, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("delivered_at", DateTime(timezone=True)),
    Column("given_up_at", DateTime(timezone=True)),
    Column("last_status", Integer),
    Column("last_error", Text),
    UniqueConstraint("event_id"),
    Index(
        "ix_notifications_due",
        "due_at",
        postgresql_where=text("delivered_at IS NULL AND given_up_at IS NULL"),
        sqlite_where=text("delivered_at IS NULL AND given_up_at IS NULL"),
    ),
    Index("ix_notifications_run_id", "run_id"),
)


# The effects ledger: each external side effect by its business key — the intent
# recorded before the call, the outcome after (see migration 0006).
effects = Table(
    "effects",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("namespace", String(100), nullable=False),
    Column("key", String(500), nullable=False),
    Column("name", String(200), nullable=False),  # the effect type: its adapter's name
    Column("run_id", String(36), nullable=False),
    Column("node", String(200), nullable=False),
    Column("iteration", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    # The fencing token of the claim that last called (or resolved) it.
    Column("fence", Integer, nullable=False, server_default="0"),
    Column("status", String(20), nullable=False),
    Column("calls", Integer, nullable=False, server_default="0"),
    Column("result", Json),
    Column("digest", String(64)),
    Column("error_class", String(20)),
    Column("error", Text),
    # What the reconciler does when the ledger says applied and the world says absent.
    Column("policy", String(20), nullable=False, server_default="flag"),
    Column("compensate", String(300)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("applied_at", DateTime(timezone=True)),
    Column("checked_at", DateTime(timezone=True)),
    # What a person recorded about it (migration 0020): outcome, note, by, at, was.
    Column("resolution", Json),
    UniqueConstraint("namespace", "key"),
    _known(EffectStatus),
    Index("ix_effects_status_updated_at", "status", "updated_at"),
    Index("ix_effects_run_id", "run_id"),
)


# Durable timers: retries, wait timeouts, node and join timeouts, cancel timeouts.
timers = Table(
    "timers",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("timer_id", String(300), primary_key=True),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("fired_at", DateTime(timezone=True)),
    Index(
        "ix_timers_due",
        "due_at",
        postgresql_where=text("fired_at IS NULL"),
        sqlite_where=text("fired_at IS NULL"),
    ),
)


# An artifact's registration: its content lives in the object store under its
# sha256; this row says which run made it, where, from what, and which version of
# its name it is (see migration 0007 and :mod:`cairn.artifacts`).
artifacts = Table(
    "artifacts",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", String(36), nullable=False),
    Column("name", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("uri", Text, nullable=False),
    Column("node", String(200), nullable=False),
    Column("iteration", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("phase", String(20), nullable=False),
    Column("call_id", String(200), nullable=False),
    Column("model", String(200)),
    Column("tool", String(200)),
    Column("params", Json),
    Column("meta", Json),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("run_id", "name", "version"),
    # A node that runs again (a retry, a recovery) and puts the same content under the
    # same name gets the registration it made before, not a new version.
    UniqueConstraint("run_id", "node", "iteration", "name", "sha256"),
    Index("ix_artifacts_sha256", "sha256"),
)


# A cron schedule (migration 0016): what it starts, when, and where its ticks stand.
# Each tick's run has a request id derived from the tick (started once, however many
# schedulers look).
schedules = Table(
    "schedules",
    metadata,
    Column("namespace", String(100), primary_key=True),
    Column("name", String(100), primary_key=True),
    Column("workflow", String(200), nullable=False),
    Column("version", Integer),  # None: the newest at each tick
    Column("cron", String(200), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("input", Json, nullable=False),
    Column("overlap", String(20), nullable=False),
    Column("catch_up_s", Float, nullable=False),
    Column("jitter_s", Float, nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("ticks_from", DateTime(timezone=True), nullable=False),
    # When a scheduler should look next; None once the expression has no more ticks.
    Column("next_at", DateTime(timezone=True)),
    Column("buffered_at", DateTime(timezone=True)),
    Column("last_tick_at", DateTime(timezone=True)),
    Column("last_run_id", String(36)),
    Column("skipped", Integer, nullable=False),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # The definition columns as a registered definition last declared them (0028); None
    # for a schedule added by hand.
    Column("declared", Json),
    CheckConstraint("overlap IN ('skip', 'buffer_one', 'cancel_running', 'allow')", name="overlap"),
    Index("ix_schedules_next_at", "next_at"),
)


# A debounce key's pending run and when it starts (0016); taken as the run starts.
debounces = Table(
    "debounces",
    metadata,
    Column("namespace", String(100), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("workflow", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    Column("first_at", DateTime(timezone=True), nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("deadline_at", DateTime(timezone=True)),
    Column("submissions", Integer, nullable=False),
    Index("ix_debounces_due_at", "due_at"),
)


# A workflow's new starts, or a queue's node messages, one namespace holds (0021).
pauses = Table(
    "pauses",
    metadata,
    Column("namespace", String(100), primary_key=True),
    Column("kind", String(16), primary_key=True),  # workflow | queue
    Column("name", String(200), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("paused_by", String(200), nullable=False),
    Column("paused_at", DateTime(timezone=True), nullable=False),
)


# A run submitted while its workflow was paused (0021), started on resume.
held_starts = Table(
    "held_starts",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("namespace", String(100), nullable=False),
    Column("workflow", String(200), nullable=False),
    Column("actor", String(200)),
    Column("held_at", DateTime(timezone=True), nullable=False),
    Index("ix_held_starts_workflow", "namespace", "workflow", "held_at"),
)


# The run a singleton key last started (migration 0016): the row submissions lock.
singletons = Table(
    "singletons",
    metadata,
    Column("namespace", String(100), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)


# The access tables — principals, API keys, the audit log, console sessions — are declared
# in schema_access, and what the fleet reports about itself in schema_fleet (this module
# is at its size), imported here, last, so that metadata holds every table whichever
# module is imported first.
from cairn.store import schema_access as _access  # noqa: E402, F401
from cairn.store import schema_fleet as _fleet  # noqa: E402, F401
