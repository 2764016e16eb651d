"""Queries, grouped by the transaction that runs them.

:class:`Store` owns the engine; :meth:`Store.transaction` yields a :class:`Tx` whose
methods are the only SQL in cairn. Every status change is a guarded write
(``UPDATE ... WHERE status IN (...)``) whose row count is checked by the caller.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    delete,
    event,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement

from cairn import clock
from cairn.errors import StoreError
from cairn.faults import fault_point
from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import StepWrites
from cairn.model.statuses import EXECUTION_ACTIVE, ExecutionStatus
from cairn.store import fastpath
from cairn.store.database import autocommit_twin
from cairn.store.errors import translated
from cairn.store.schema import (
    ArtifactRow,
    EffectRow,
    EventRow,
    InboxRow,
    NodeExecutionRow,
    NotificationRow,
    OutboxRow,
    RunRow,
    SnapshotRow,
    TimerRow,
    WorkflowRow,
)

runs = cast(Table, RunRow.__table__)
events = cast(Table, EventRow.__table__)
snapshots = cast(Table, SnapshotRow.__table__)
executions = cast(Table, NodeExecutionRow.__table__)
outbox = cast(Table, OutboxRow.__table__)
timers = cast(Table, TimerRow.__table__)
inbox = cast(Table, InboxRow.__table__)
effects = cast(Table, EffectRow.__table__)
artifacts = cast(Table, ArtifactRow.__table__)
notifications = cast(Table, NotificationRow.__table__)
workflows = cast(Table, WorkflowRow.__table__)

ACTIVE_EXECUTION = tuple(status.value for status in EXECUTION_ACTIVE)
_SCHEDULED, _RUNNING = ExecutionStatus.SCHEDULED.value, ExecutionStatus.RUNNING.value
_HELD, _FAILED = ExecutionStatus.HELD.value, ExecutionStatus.FAILED.value


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


def _where(key: ExecutionKey) -> Any:
    """The row of execution ``key``."""
    return and_(
        executions.c.run_id == key.run_id,
        executions.c.node == key.node,
        executions.c.iteration == key.iteration,
        executions.c.phase == key.phase,
    )


def _unfinished(key: ExecutionKey, attempt: int) -> Any:
    """Execution ``key`` at ``attempt``, while it has no result."""
    return and_(
        _where(key),
        executions.c.attempt == attempt,
        executions.c.status.in_(ACTIVE_EXECUTION),
    )


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


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._autocommit = autocommit_twin(engine) if self.dialect == "postgresql" else None
        if self.dialect == "sqlite":
            _serialise_sqlite_writers(engine)

    def dispose(self) -> None:
        """Close every pooled connection (after a fork, a restart of the database, or at
        the end)."""
        self.engine.dispose()
        if self._autocommit is not None:
            self._autocommit.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with translated(), self.engine.begin() as connection, translated(connection):
            yield Tx(connection, self.dialect)

    @contextmanager
    def reading(self) -> Iterator[Tx]:
        """A read-only transaction, ended by a rollback: reads never count as commits
        (on SQLite a deferred transaction, which the writer does not block)."""
        with translated(), self.engine.connect() as plain, translated(plain):
            connection = plain.execution_options(cairn_read_only=True)
            yield Tx(connection, self.dialect)
            connection.rollback()

    @contextmanager
    def statements(self, *, writes: bool = False) -> Iterator[Tx]:
        """PostgreSQL: a connection on which each statement is a transaction of its own,
        for the hot path, whose read and whose write are one statement each: no BEGIN
        and COMMIT round trips (measured: they cost as much as the statements). Only
        for single statements that must stand alone, and reads of immutable rows.
        Elsewhere, a transaction: read-only, unless the caller ``writes``."""
        if self._autocommit is None:
            with self.transaction() if writes else self.reading() as tx:
                yield tx
            return
        with translated(), self._autocommit.connect() as connection, translated(connection):
            yield Tx(connection, self.dialect)

    def ping(self) -> None:
        """Ask the database something trivial (a readiness probe); StoreUnavailable if it
        cannot answer."""
        with self.reading() as tx:
            tx.connection.execute(select(1))


def _serialise_sqlite_writers(engine: Engine) -> None:
    """SQLite: take the write lock at BEGIN (BEGIN IMMEDIATE), so that two transactions
    never both read and then deadlock upgrading to write; busy_timeout queues them."""

    @event.listens_for(engine, "connect")
    def _autocommit_driver(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Connection) -> None:
        read_only = connection.get_execution_options().get("cairn_read_only", False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


class Tx:
    """One database transaction (or a read-only connection)."""

    def __init__(self, connection: Connection, dialect: str) -> None:
        self.connection = connection
        self.dialect = dialect

    def _insert(self, table: Any) -> Any:
        return postgresql.insert(table) if self.dialect == "postgresql" else sqlite.insert(table)

    def _driver(self) -> Any:
        """The psycopg connection under this transaction (see cairn.store.fastpath)."""
        return self.connection.connection.driver_connection

    def stamp(self) -> Any:
        """The time to write into a column something later compares with :meth:`now`
        (dispatch, outbox and ledger ages): PostgreSQL's own clock, never this process's,
        which may be minutes off. SQLite is one process on one machine: its clock."""
        return func.now() if self.dialect == "postgresql" else utcnow()

    def now(self) -> float:
        """Seconds since the epoch by the database's clock: the one clock all processes share."""
        if self.dialect == "postgresql":
            value = self.connection.execute(select(func.extract("epoch", func.clock_timestamp())))
            return float(value.scalar_one())
        return utcnow().timestamp()

    # -- workflows ----------------------------------------------------------------------

    def register_workflow(
        self, name: str, version: int, spec: Mapping[str, Any], definition_format: int
    ) -> bool:
        """Insert a definition compiled under ``definition_format``; True if new. A
        different spec under a taken (name, version) raises: a version is immutable once
        runs may have pinned it — and so is the format it was compiled under."""
        digest = spec_digest(spec)
        stmt = (
            self._insert(workflows)
            .values(
                name=name,
                version=version,
                digest=digest,
                spec=dict(spec),
                registered_at=utcnow(),
                format=definition_format,
            )
            .on_conflict_do_nothing()
            .returning(workflows.c.name)  # not rowcount: -1 for a skipped insert here
        )
        if self.connection.execute(stmt).first() is not None:
            return True
        existing = self.connection.execute(
            select(workflows.c.digest).where(
                workflows.c.name == name, workflows.c.version == version
            )
        ).scalar_one()
        if existing != digest:
            raise StoreError(
                f"workflow {name} version {version} is already registered with a "
                "different definition; register the change as a new version"
            )
        return False

    def workflow_spec(
        self, name: str, version: int | None = None
    ) -> tuple[int, dict[str, Any], int]:
        """(version, spec, the format it was registered under); (0, {}, 0) if none."""
        query = select(workflows.c.version, workflows.c.spec, workflows.c.format).where(
            workflows.c.name == name
        )
        if version is not None:
            query = query.where(workflows.c.version == version)
        row = self.connection.execute(query.order_by(workflows.c.version.desc()).limit(1)).first()
        if row is None:
            return 0, {}, 0
        return row.version, dict(row.spec), int(row.format)

    def workflow_version(self, name: str, version: int | None) -> tuple[int | None, float]:
        """The newest registered version of ``name`` (``version`` itself, if given and
        registered; None if not) and the database's clock."""
        if self.dialect == "postgresql":
            row = fastpath.workflow_version(self._driver(), name, version)
            return row.version, float(row.db_now)
        query = select(func.max(workflows.c.version)).where(workflows.c.name == name)
        if version is not None:
            query = query.where(workflows.c.version == version)
        return self.connection.execute(query).scalar(), utcnow().timestamp()

    # -- runs ---------------------------------------------------------------------------

    def insert_run(self, values: Mapping[str, Any]) -> bool:
        """Insert a run; False if its (namespace, request id) already exists."""
        # RETURNING, not rowcount: psycopg reports -1 for a skipped insert here.
        stmt = self._insert(runs).values(**values).on_conflict_do_nothing()
        return self.connection.execute(stmt.returning(runs.c.id)).first() is not None

    def submit_run(
        self, values: Mapping[str, Any], writes: StepWrites
    ) -> tuple[bool, dict[tuple[str, int, str], int]]:
        """PostgreSQL only: a new run, already advanced by its first step, in one statement
        (see cairn.store.fastpath.SUBMIT_RUN). False if its request id is taken."""
        if self.dialect != "postgresql":
            raise StoreError("the one-statement submit needs PostgreSQL")
        return fastpath.submit_run(self._driver(), values, writes)

    def submit_runs(
        self, runs: Sequence[tuple[Mapping[str, Any], StepWrites]]
    ) -> list[tuple[bool, dict[tuple[str, int, str], int]]]:
        """PostgreSQL only: :meth:`submit_run` for many runs, pipelined, in this
        transaction."""
        if self.dialect != "postgresql":
            raise StoreError("the pipelined submit needs PostgreSQL")
        return fastpath.submit_runs(self._driver(), runs)

    def run_by_request(self, namespace: str, request_id: str) -> Any:
        return self.connection.execute(
            select(runs).where(runs.c.namespace == namespace, runs.c.request_id == request_id)
        ).first()

    def lock_run(self, run_id: str, *, skip_locked: bool = False) -> tuple[Any, float]:
        """Lock the run row for this transaction; also read the database clock, in the same
        round trip, so that every event's time comes from one clock. ``skip_locked``: a
        row another transaction holds comes back as None instead of being waited for."""
        if self.dialect != "postgresql":
            return self.run(run_id, lock=True), utcnow().timestamp()
        clock = func.extract("epoch", func.clock_timestamp()).label("db_now")
        row = self.connection.execute(
            select(runs, clock)
            .where(runs.c.id == run_id)
            .with_for_update(of=runs, skip_locked=skip_locked)
        ).first()
        return row, (float(row.db_now) if row is not None else 0.0)

    def run(self, run_id: str, *, lock: bool = False) -> Any:
        query = select(runs).where(runs.c.id == run_id)
        if lock:
            query = query.with_for_update()
        return self.connection.execute(query).first()

    def write_step(self, run_id: str, writes: StepWrites, *, last: bool = True) -> list[int]:
        """Write what a decision produced: each dispatch (its idempotency row and outbox
        message), the event, a snapshot when due, the run row, and published messages
        marked sent; return the outbox ids. The ``last`` statement of its transaction
        commits it in the same round trip on PostgreSQL (see cairn.store.fastpath)."""
        if self.dialect == "postgresql":
            return fastpath.write_step(self._driver(), run_id, writes, commit=last)
        ids = []
        for key, attempt, payload in writes.dispatches:
            self.connection.execute(self._schedule_statement(key, attempt))
            ids.append(
                int(
                    self.connection.execute(
                        insert(outbox)
                        .values(
                            run_id=key.run_id,
                            topic="node",
                            payload=dict(payload),
                            created_at=self.stamp(),
                        )
                        .returning(outbox.c.id)
                    ).scalar_one()
                )
            )
        self.connection.execute(
            insert(events).values(
                run_id=run_id,
                seq=writes.seq,
                type=writes.event["type"],
                data=dict(writes.event),
                outcome=dict(writes.outcome),
                at=writes.at,
            )
        )
        if writes.snapshot is not None:
            state_format, codec, body = writes.snapshot
            self.connection.execute(
                self._insert(snapshots)
                .values(
                    run_id=run_id,
                    seq=writes.seq,
                    format=state_format,
                    codec=codec,
                    body=body,
                    created_at=self.stamp(),
                )
                .on_conflict_do_nothing()
            )
            fault_point("snapshot.before_commit")
        for timer_id, due_at in writes.armed:
            self.arm_timer(run_id, timer_id, due_at)
        for timer_id in writes.disarmed:
            self.disarm_timer(run_id, timer_id)
        cached = writes.run.get("state")
        self.connection.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(**{**writes.run, "state": json.loads(cached) if cached else None})
        )
        self.mark_sent(writes.sent)
        return ids

    def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[Any]:
        query = select(runs).order_by(runs.c.created_at.desc()).limit(limit)
        if status:
            query = query.where(runs.c.status == status)
        if workflow:
            query = query.where(runs.c.workflow == workflow)
        return list(self.connection.execute(query))

    def runs_page(
        self,
        namespace: str,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
    ) -> list[Any]:
        """A page of a namespace's runs, newest first, keyset-paginated on (created_at,
        id): the page after ``before`` stays the same while new runs arrive (an offset
        would shift)."""
        query = select(
            runs.c.id,
            runs.c.workflow,
            runs.c.version,
            runs.c.status,
            runs.c.request_id,
            runs.c.current,
            runs.c.reason,
            runs.c.last_seq,
            runs.c.created_at,
            runs.c.updated_at,
        ).where(runs.c.namespace == namespace)
        if status:
            query = query.where(runs.c.status == status)
        if workflow:
            query = query.where(runs.c.workflow == workflow)
        if before is not None:
            created, run_id = before
            query = query.where(
                (runs.c.created_at < created)
                | ((runs.c.created_at == created) & (runs.c.id < run_id))
            )
        order = (runs.c.created_at.desc(), runs.c.id.desc())
        return list(self.connection.execute(query.order_by(*order).limit(limit)))

    def runs_by_requests(self, namespace: str, request_ids: Sequence[str]) -> list[Any]:
        """The runs these request ids already started in the namespace (one query for a
        whole batch)."""
        if not request_ids:
            return []
        return list(
            self.connection.execute(
                select(
                    runs.c.id,
                    runs.c.workflow,
                    runs.c.version,
                    runs.c.input,
                    runs.c.request_id,
                    runs.c.webhook_url,
                ).where(runs.c.namespace == namespace, runs.c.request_id.in_(list(request_ids)))
            )
        )

    def run_head(self, run_id: str) -> Any:
        """A run's namespace, status, last seq and running nodes, without its cached
        state: what a progress stream polls."""
        return self.connection.execute(
            select(runs.c.namespace, runs.c.status, runs.c.last_seq, runs.c.current).where(
                runs.c.id == run_id
            )
        ).first()

    def registered_workflows(self) -> list[Any]:
        return list(
            self.connection.execute(
                select(workflows.c.name, workflows.c.version, workflows.c.registered_at).order_by(
                    workflows.c.name, workflows.c.version
                )
            )
        )

    # -- events and snapshots -----------------------------------------------------------

    def events_after(self, run_id: str, seq: int, upto: int | None = None) -> list[Any]:
        query = select(
            events.c.seq, events.c.type, events.c.data, events.c.outcome, events.c.at
        ).where(events.c.run_id == run_id, events.c.seq > seq)
        if upto is not None:
            query = query.where(events.c.seq <= upto)
        return list(self.connection.execute(query.order_by(events.c.seq)))

    def latest_snapshot(self, run_id: str, at_or_before: int | None = None) -> Snapshot | None:
        query = select(
            snapshots.c.seq, snapshots.c.format, snapshots.c.codec, snapshots.c.body
        ).where(snapshots.c.run_id == run_id)
        if at_or_before is not None:
            query = query.where(snapshots.c.seq <= at_or_before)
        row = self.connection.execute(query.order_by(snapshots.c.seq.desc()).limit(1)).first()
        if row is None:
            return None
        return Snapshot(row.seq, row.format, decode_snapshot(row.codec, bytes(row.body)))

    def snapshot_seqs(self, run_id: str) -> list[int]:
        return list(
            self.connection.execute(
                select(snapshots.c.seq)
                .where(snapshots.c.run_id == run_id)
                .order_by(snapshots.c.seq)
            ).scalars()
        )

    def waiting_runs(self, namespace: str | None, limit: int) -> list[Any]:
        """Runs parked for a person (a wait, a held node), longest waiting first."""
        query = select(runs).where(runs.c.status == "waiting")
        if namespace is not None:
            query = query.where(runs.c.namespace == namespace)
        return list(self.connection.execute(query.order_by(runs.c.updated_at).limit(limit)))

    def runs_with_snapshots_over(self, count: int, limit: int) -> list[str]:
        return list(
            self.connection.execute(
                select(snapshots.c.run_id)
                .group_by(snapshots.c.run_id)
                .having(func.count() > count)
                .limit(limit)
            ).scalars()
        )

    def delete_snapshots(self, run_id: str, seqs: Sequence[int]) -> int:
        if not seqs:
            return 0
        return int(
            self.connection.execute(
                delete(snapshots).where(
                    snapshots.c.run_id == run_id, snapshots.c.seq.in_(list(seqs))
                )
            ).rowcount
        )

    # -- retention ----------------------------------------------------------------------

    def expired_runs(self, finished_before: float, limit: int) -> list[str]:
        """Runs that ended before ``finished_before``, oldest first — once their artifacts
        are gone (artifacts have their own retention, and their blobs go with them)."""
        has_artifacts = select(artifacts.c.run_id).where(artifacts.c.run_id == runs.c.id)
        query = (
            select(runs.c.id)
            .where(runs.c.finished_at < from_epoch(finished_before), ~has_artifacts.exists())
            .order_by(runs.c.finished_at)
            .limit(limit)
        )
        return [str(row.id) for row in self.connection.execute(query)]

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete runs and everything kept for them — events, snapshots, executions,
        outbox messages, timers, inbox entries, notifications — except the effects
        ledger, whose keys keep guarding the outside world against a late duplicate call."""
        if not run_ids:
            return 0
        ids = list(run_ids)
        for table in (events, snapshots, executions, outbox, timers, inbox, notifications):
            self.connection.execute(delete(table).where(table.c.run_id.in_(ids)))
        return int(self.connection.execute(delete(runs).where(runs.c.id.in_(ids))).rowcount)

    # -- node executions (the idempotency table) ----------------------------------------

    def _schedule_statement(self, key: ExecutionKey, attempt: int) -> Any:
        now = self.stamp()
        stmt = self._insert(executions).values(
            run_id=key.run_id,
            node=key.node,
            iteration=key.iteration,
            phase=key.phase,
            status=_SCHEDULED,
            attempt=attempt,
            dispatched_at=now,
        )
        return stmt.on_conflict_do_update(
            index_elements=["run_id", "node", "iteration", "phase"],
            set_={
                "status": _SCHEDULED,
                "attempt": attempt,
                "dispatched_at": now,
                "finished_at": None,
                "error_class": None,
                "error": None,
            },
        )

    def execution_and_run(self, key: ExecutionKey) -> tuple[Any, Any]:
        """The execution's status and its run (with the cached state), in one statement."""
        if self.dialect == "postgresql":
            row = fastpath.execution_and_run(self._driver(), key.params())
            return (row, row) if row is not None else (None, self.run(key.run_id))
        query = (
            select(
                executions.c.status.label("execution_status"),
                executions.c.attempt.label("execution_attempt"),
                executions.c.fence.label("execution_fence"),
                executions.c.recoveries.label("execution_recoveries"),
                runs,
            )
            .join(runs, runs.c.id == executions.c.run_id)
            .where(_where(key))
        )
        row = self.connection.execute(query).first()
        if row is None:
            return None, self.run(key.run_id)
        return row, row

    def complete_step(
        self,
        key: ExecutionKey,
        *,
        attempt: int,
        fence: int,
        known_seq: int,
        result: Mapping[str, Any],
        writes: StepWrites,
    ) -> tuple[bool, bool, dict[tuple[str, int, str], int]]:
        """PostgreSQL only: the optimistic, all-or-nothing completion of a step and its
        commit (see cairn.store.fastpath.COMPLETE_STEP)."""
        if self.dialect != "postgresql":
            raise StoreError("the one-statement completion needs PostgreSQL")
        return fastpath.complete_step(
            self._driver(),
            key.params(),
            attempt=attempt,
            fence=fence,
            known_seq=known_seq,
            result=result,
            writes=writes,
        )

    def finish_and_lock(
        self, key: ExecutionKey, attempt: int, fence: int, values: Mapping[str, Any]
    ) -> tuple[Any, float]:
        """Record the first result for (key, attempt), if no claim newer than ``fence``
        took the execution over, and lock its run, in one round trip on PostgreSQL.
        Returns (None, 0) if nothing was recorded."""
        finish = (
            update(executions)
            .where(_unfinished(key, attempt), executions.c.fence <= fence)
            .values(**values)
        )
        if self.dialect == "postgresql":
            row = fastpath.finish_and_lock(self._driver(), key.params(), attempt, fence, values)
            return (row, float(row.db_now)) if row is not None else (None, 0.0)
        if not self.connection.execute(finish).rowcount:
            return None, 0.0
        return self.lock_run(key.run_id)

    def set_execution_status(self, key: ExecutionKey, status: str) -> None:
        self.connection.execute(
            update(executions)
            .where(_where(key), executions.c.status.in_(ACTIVE_EXECUTION))
            .values(status=status, finished_at=self.stamp())
        )

    def hold_execution(self, key: ExecutionKey, attempt: int) -> None:
        """Recovery stops at this execution until an operator decides (see NodeHeld): it
        lost its worker (unfinished), or it is a compensation that failed for good."""
        self.connection.execute(
            update(executions)
            .where(
                _where(key),
                executions.c.attempt == attempt,
                executions.c.status.in_([*ACTIVE_EXECUTION, _FAILED]),
            )
            .values(status=_HELD)
        )

    def settle_execution(
        self, key: ExecutionKey, status: str, result: Mapping[str, Any] | None, error: str | None
    ) -> None:
        """Write an operator's settlement of a held execution, as a worker's result."""
        self.connection.execute(
            update(executions)
            .where(_where(key), executions.c.status == _HELD)
            .values(
                status=status,
                result=dict(result) if result is not None else None,
                error=error,
                worker="operator",
                finished_at=self.stamp(),
            )
        )

    def executions_of(self, run_id: str) -> list[Any]:
        return list(
            self.connection.execute(
                select(executions)
                .where(executions.c.run_id == run_id)
                .order_by(executions.c.dispatched_at)
            )
        )

    def stalled_executions(self, older_than: float, limit: int) -> list[Any]:
        """Dispatched, unfinished executions last (re)published before ``older_than``."""
        return list(
            self.connection.execute(
                select(executions)
                .where(
                    executions.c.status.in_(ACTIVE_EXECUTION),
                    executions.c.dispatched_at < from_epoch(older_than),
                )
                .order_by(executions.c.dispatched_at)
                .limit(limit)
            )
        )

    def stop_requested(self, key: ExecutionKey, attempt: int) -> bool:
        """Should the worker running this execution stop? Its run is being cancelled, or
        the run no longer waits for it (a join completed, a node timeout, a detach)."""
        row = self.connection.execute(
            select(
                runs.c.status, executions.c.status.label("execution_status"), executions.c.attempt
            )
            .join(executions, executions.c.run_id == runs.c.id)
            .where(_where(key))
        ).first()
        return (
            row is None
            or row.status == "cancelling"
            or row.execution_status not in ACTIVE_EXECUTION
            or row.attempt != attempt
        )

    def claim_execution(
        self, key: ExecutionKey, attempt: int, fence: int, *, first: bool = False
    ) -> bool:
        """Record a claim (its fence) on the unfinished execution: it is running. False if
        it finished, a newer claim is recorded already, or — ``first`` — any worker has
        claimed this attempt before (it may have started: an irreversible node's rule)."""
        conditions = [_unfinished(key, attempt), executions.c.fence < fence]
        if first:
            conditions.append(executions.c.status == _SCHEDULED)
        claimed = self.connection.execute(
            update(executions).where(*conditions).values(fence=fence, status=_RUNNING)
        )
        return bool(claimed.rowcount)

    def execution(self, key: ExecutionKey) -> Any:
        """The execution row (attempt, status, dispatch time), or None."""
        return self.connection.execute(select(executions).where(_where(key))).first()

    def execution_fence(self, key: ExecutionKey) -> int:
        fence = self.connection.execute(select(executions.c.fence).where(_where(key))).scalar()
        return int(fence or 0)

    def touch_execution(self, key: ExecutionKey, attempt: int, *, died: bool) -> int | None:
        """Restart an unfinished execution's recovery clock, counting the recovery if its
        worker died running it; the count, or None if it finished meanwhile."""
        row = self.connection.execute(
            update(executions)
            .where(_unfinished(key, attempt))
            .values(
                dispatched_at=self.stamp(), recoveries=executions.c.recoveries + (1 if died else 0)
            )
            .returning(executions.c.recoveries)
        ).first()
        return None if row is None else int(row.recoveries)

    def has_unsent(self, older_than: float) -> bool:
        return (
            self.connection.execute(
                select(outbox.c.id)
                .where(outbox.c.sent_at.is_(None), outbox.c.created_at < from_epoch(older_than))
                .limit(1)
            ).first()
            is not None
        )

    def claim_unsent(self, older_than: float, limit: int) -> list[Any]:
        """Unsent rows, locked; rows another relay holds are skipped, not waited for."""
        query = (
            select(outbox)
            .where(
                outbox.c.sent_at.is_(None),
                outbox.c.created_at < from_epoch(older_than),
            )
            .order_by(outbox.c.id)
            .limit(limit)
        )
        if self.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True)
        return list(self.connection.execute(query))

    def _mark_sent_statement(self, ids: Sequence[int]) -> Any:
        # PostgreSQL: one array parameter, so the SQL text (and its prepared plan) does not
        # change with the number of ids.
        chosen = (
            outbox.c.id == func.any(postgresql.array(list(ids)))
            if self.dialect == "postgresql"
            else outbox.c.id.in_(list(ids))
        )
        return (
            update(outbox)
            .where(chosen, outbox.c.sent_at.is_(None))
            .values(sent_at=self.stamp(), publishes=outbox.c.publishes + 1)
        )

    def mark_sent(self, ids: Sequence[int]) -> None:
        if ids:
            self.connection.execute(self._mark_sent_statement(ids))

    # -- the effects ledger -------------------------------------------------------------

    def record_intent(self, values: Mapping[str, Any], *, phase: str | None) -> Intent:
        """Record the intent to apply a new effect (``values``: its row) — in the same
        statement, only if its execution (its run, node and iteration, and ``phase``) has
        no claim newer than ``values["fence"]`` recorded. ``phase`` None: no execution to
        fence against (seeding a ledger by hand)."""
        stamp = self.stamp()  # the reconciler's grace compares it with PostgreSQL's clock
        values = {**values, "created_at": stamp, "updated_at": stamp}
        if phase is None:
            stmt = self._insert(effects).values(**values)
        else:
            names = list(values)
            row = select(
                *(
                    value
                    if isinstance(value, ColumnElement)
                    else literal(value, effects.c[name].type)
                    for name, value in values.items()
                )
            )
            newer = self._newer_claim(values, phase)
            stmt = self._insert(effects).from_select(names, row.where(~newer.exists()))
        # RETURNING, not rowcount: psycopg reports -1 for a skipped insert here.
        stmt = stmt.on_conflict_do_nothing().returning(effects.c.id)
        if self.connection.execute(stmt).first() is not None:
            return Intent.RECORDED
        if phase is not None and self.connection.execute(self._newer_claim(values, phase)).first():
            return Intent.FENCED
        return Intent.KNOWN

    @staticmethod
    def _newer_claim(values: Mapping[str, Any], phase: str) -> Any:
        """The execution an effect is made by, if a claim newer than its fence is on record."""
        key = ExecutionKey(values["run_id"], values["node"], values["iteration"], phase)
        return select(executions.c.fence).where(_where(key), executions.c.fence > values["fence"])

    def effect(self, namespace: str, key: str, *, lock: bool = False) -> Any:
        query = select(effects).where(effects.c.namespace == namespace, effects.c.key == key)
        if lock:
            query = query.with_for_update()
        return self.connection.execute(query).first()

    def update_effect(
        self,
        effect_id: int,
        changes: Mapping[str, Any],
        *,
        status: str | None = None,
        fence_at_most: int | None = None,
        claim: tuple[ExecutionKey, int] | None = None,
    ) -> bool:
        """Change an effect, only while it is in ``status``, no claim newer than
        ``fence_at_most`` has taken it over, and — ``claim``: (execution, fence) — that
        execution has no claim newer than that fence on record; True if it changed."""
        query = update(effects).where(effects.c.id == effect_id)
        if status is not None:
            query = query.where(effects.c.status == status)
        if fence_at_most is not None:
            query = query.where(effects.c.fence <= fence_at_most)
        if claim is not None:
            execution, fence = claim
            newer = select(executions.c.fence).where(_where(execution), executions.c.fence > fence)
            query = query.where(~newer.exists())
        values = {**changes, "updated_at": self.stamp()}
        return bool(self.connection.execute(query.values(**values)).rowcount)

    def effects_to_check(self, stale_before: float, limit: int) -> list[Any]:
        """Ids of the effects the reconciler should look at: intents and unknown outcomes
        older than ``stale_before`` (their caller may have died; their call's response was
        lost), and applied effects never checked against the outside world."""
        unsettled = effects.c.status.in_(["intent", "unknown"])
        query = (
            select(effects.c.id)
            .where(
                (unsettled & (effects.c.updated_at < from_epoch(stale_before)))
                | ((effects.c.status == "applied") & effects.c.checked_at.is_(None))
            )
            .order_by(effects.c.id)
            .limit(limit)
        )
        return [row.id for row in self.connection.execute(query)]

    def claim_effect(self, effect_id: int) -> Any:
        """Lock an effect for this transaction, or None if another holds it (PostgreSQL
        skips it; SQLite has one writer anyway)."""
        query = select(effects).where(effects.c.id == effect_id)
        if self.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True)
        return self.connection.execute(query).first()

    def effects_of(self, run_id: str) -> list[Any]:
        return list(
            self.connection.execute(
                select(effects).where(effects.c.run_id == run_id).order_by(effects.c.id)
            )
        )

    # -- the inbox ----------------------------------------------------------------------

    def post(self, run_id: str, event: Mapping[str, Any]) -> int:
        """Leave an event for ``run_id`` in the inbox; returns its id."""
        stmt = insert(inbox).values(run_id=run_id, event=dict(event), created_at=self.stamp())
        return int(self.connection.execute(stmt.returning(inbox.c.id)).scalar_one())

    def posted(self, limit: int) -> list[Any]:
        """Inbox entries, oldest first: (id, run_id)."""
        return list(
            self.connection.execute(
                select(inbox.c.id, inbox.c.run_id).order_by(inbox.c.id).limit(limit)
            )
        )

    def take_posted(self, entry_id: int) -> dict[str, Any] | None:
        """Remove an inbox entry and return its event; None if another process took it."""
        row = self.connection.execute(
            delete(inbox).where(inbox.c.id == entry_id).returning(inbox.c.event)
        ).first()
        return dict(row.event) if row is not None else None

    # -- fleet gauges (Prometheus) --------------------------------------------------------

    def fleet_gauges(self, now: float) -> FleetGauges:
        """What the fleet's backlogs look like now, for a metrics scrape: a few indexed
        aggregates, no row read one by one."""

        def backlog(table: Table, stamp: Any, *where: Any) -> tuple[int, float | None]:
            count, oldest = self.connection.execute(
                select(func.count(), func.min(stamp)).select_from(table).where(*where)
            ).one()
            return int(count), (to_epoch(oldest) if oldest is not None else None)

        by_status = self.connection.execute(
            select(runs.c.status, func.count()).group_by(runs.c.status)
        )
        effects_by_status = self.connection.execute(
            select(effects.c.status, func.count()).group_by(effects.c.status)
        )
        held = self.connection.execute(
            select(func.count()).select_from(executions).where(executions.c.status == _HELD)
        ).scalar_one()
        return FleetGauges(
            runs={str(status): int(count) for status, count in by_status},
            effects={str(status): int(count) for status, count in effects_by_status},
            held_executions=int(held),
            unsent=backlog(outbox, outbox.c.created_at, outbox.c.sent_at.is_(None)),
            due_timers=backlog(
                timers,
                timers.c.due_at,
                timers.c.fired_at.is_(None),
                timers.c.due_at <= from_epoch(now),
            ),
            inbox=backlog(inbox, inbox.c.created_at),
            notifications=backlog(
                notifications,
                notifications.c.created_at,
                notifications.c.delivered_at.is_(None),
                notifications.c.given_up_at.is_(None),
            ),
        )

    # -- notifications (webhooks) -------------------------------------------------------

    def add_notification(self, values: Mapping[str, Any]) -> bool:
        """Queue a notification; False if its event id is queued already."""
        stmt = self._insert(notifications).values(**values).on_conflict_do_nothing()
        return self.connection.execute(stmt.returning(notifications.c.id)).first() is not None

    def claim_notifications(self, now: float, hold_s: float, limit: int) -> list[Any]:
        """Take the due notifications, oldest due first, for ``hold_s`` seconds: their
        ``due_at`` moves past the delivery's timeout, so a notifier that dies mid-delivery
        leaves them to another once that passes, and two notifiers never hold the same.
        Each claim counts an attempt."""
        due = (
            select(notifications.c.id)
            .where(
                notifications.c.delivered_at.is_(None),
                notifications.c.given_up_at.is_(None),
                notifications.c.due_at <= from_epoch(now),
            )
            .order_by(notifications.c.due_at)
            .limit(limit)
        )
        if self.dialect == "postgresql":
            due = due.with_for_update(skip_locked=True)
        claim = (
            update(notifications)
            .where(notifications.c.id.in_(due.scalar_subquery()))
            .values(due_at=from_epoch(now + hold_s), attempts=notifications.c.attempts + 1)
            .returning(*notifications.c)
        )
        return list(self.connection.execute(claim))

    def settle_notification(
        self,
        notification_id: int,
        attempts: int,
        *,
        status: int | None,
        error: str | None,
        delivered: bool = False,
        retry_at: float | None = None,
    ) -> bool:
        """Record a delivery attempt's outcome: delivered, to be retried at ``retry_at``,
        or (neither) given up. Only the holder of attempt ``attempts`` may: a notifier
        whose hold lapsed while it waited on a slow receiver records nothing."""
        values: dict[str, Any] = {"last_status": status, "last_error": error}
        if delivered:
            values["delivered_at"] = utcnow()
        elif retry_at is not None:
            values["due_at"] = from_epoch(retry_at)
        else:
            values["given_up_at"] = utcnow()
        stmt = (
            update(notifications)
            .where(
                notifications.c.id == notification_id,
                notifications.c.attempts == attempts,
                notifications.c.delivered_at.is_(None),
                notifications.c.given_up_at.is_(None),
            )
            .values(**values)
        )
        return bool(self.connection.execute(stmt.returning(notifications.c.id)).first())

    def notifications_of(self, run_id: str) -> list[Any]:
        return list(
            self.connection.execute(
                select(notifications)
                .where(notifications.c.run_id == run_id)
                .order_by(notifications.c.id)
            )
        )

    # -- timers -------------------------------------------------------------------------

    def arm_timer(self, run_id: str, timer_id: str, due_at: float) -> None:
        stmt = self._insert(timers).values(
            run_id=run_id, timer_id=timer_id, due_at=from_epoch(due_at), fired_at=None
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "timer_id"],
            set_={"due_at": from_epoch(due_at), "fired_at": None},
        )
        self.connection.execute(stmt)

    def disarm_timer(self, run_id: str, timer_id: str) -> None:
        self.connection.execute(
            delete(timers).where(timers.c.run_id == run_id, timers.c.timer_id == timer_id)
        )

    def due_timers(self, until: float, limit: int) -> list[Any]:
        """Timers due by ``until``, soonest first: (run_id, timer_id, due_at)."""
        return list(
            self.connection.execute(
                select(timers.c.run_id, timers.c.timer_id, timers.c.due_at)
                .where(
                    timers.c.fired_at.is_(None),
                    timers.c.due_at <= from_epoch(until),
                )
                .order_by(timers.c.due_at)
                .limit(limit)
            )
        )

    def postpone_timer(self, run_id: str, timer_id: str, due_at: float) -> bool:
        """Move a timer not yet fired to ``due_at`` (the database's clock)."""
        return bool(
            self.connection.execute(
                update(timers)
                .where(
                    timers.c.run_id == run_id,
                    timers.c.timer_id == timer_id,
                    timers.c.fired_at.is_(None),
                )
                .values(due_at=from_epoch(due_at))
            ).rowcount
        )

    def take_timer(self, run_id: str, timer_id: str) -> bool:
        """Mark a due timer fired; False if another scheduler (or a disarm) got there first."""
        return bool(
            self.connection.execute(
                delete(timers).where(
                    timers.c.run_id == run_id,
                    timers.c.timer_id == timer_id,
                    timers.c.fired_at.is_(None),
                )
            ).rowcount
        )
