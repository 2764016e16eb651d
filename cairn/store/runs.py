"""The statements about runs, their events and snapshots — a run's
lifecycle as the store keeps it (dialect-neutral; a backend overrides what it does
faster, :mod:`cairn.store.postgres`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update

from cairn.errors import StaleTransition, StoreError
from cairn.model.workflow_names import qualified
from cairn.store.listing import ListingTx
from cairn.store.records import (
    EventRecord,
    RequestedRun,
    RunHead,
    RunRecord,
    Snapshot,
    decode_snapshot,
    from_epoch,
    to_epoch,
)
from cairn.store.schema import (
    artifacts,
    checkpoints,
    events,
    executions,
    inbox,
    model_calls,
    notifications,
    outbox,
    runs,
    snapshots,
    timers,
)


class RunsTx(ListingTx):
    """The run's rows: definitions, runs, events, snapshots, listing and retention."""

    def insert_run(self, values: Mapping[str, Any]) -> bool:
        """Insert a run; False if its (namespace, request id) already exists."""
        # RETURNING, not rowcount: psycopg reports -1 for a skipped insert here.
        stmt = self._insert(runs).values(**values).on_conflict_do_nothing()
        return self.connection.execute(stmt.returning(runs.c.id)).first() is not None

    def run_by_request(self, namespace: str, request_id: str) -> RunRecord | None:
        row = self.connection.execute(
            select(runs).where(runs.c.namespace == namespace, runs.c.request_id == request_id)
        ).first()
        return None if row is None else RunRecord.of(row)

    def lock_run(self, run_id: str, *, skip_locked: bool = False) -> tuple[RunRecord | None, float]:
        """Lock the run row for this transaction; also read the database clock, in the same
        round trip, so that every event's time comes from one clock. ``skip_locked``: a
        row another transaction holds comes back as None instead of being waited for."""
        return self.run(run_id, lock=True), self.now()

    def run(self, run_id: str, *, lock: bool = False) -> RunRecord | None:
        query = select(runs).where(runs.c.id == run_id)
        if lock:
            query = query.with_for_update()
        row = self.connection.execute(query).first()
        return None if row is None else RunRecord.of(row)

    def inserted_run(self, run_id: str) -> RunRecord:
        """The run this transaction inserted, locked for the rest of it."""
        row = self.run(run_id, lock=True)
        if row is None:
            raise StoreError(f"run {run_id} was inserted in this transaction, yet is not there")
        return row

    def move_run_version(self, run_id: str, from_version: int, to_version: int) -> None:
        """Pin the run to another version of its workflow (a migration, or its rollback),
        in the transaction that writes the move's event; :class:`StaleTransition` if the
        run is no longer on ``from_version``."""
        moved = self.connection.execute(
            update(runs)
            .where(runs.c.id == run_id, runs.c.version == from_version)
            .values(version=to_version)
        )
        if not moved.rowcount:
            raise StaleTransition(f"run {run_id} is no longer on version {from_version}")

    def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        query = select(runs).order_by(runs.c.created_at.desc()).limit(limit)
        if status:
            query = query.where(runs.c.status == status)
        if workflow:
            query = query.where(runs.c.workflow == workflow)
        return [RunRecord.of(row) for row in self.connection.execute(query)]

    def forks_of(self, namespace: str, run_id: str, limit: int) -> list[dict[str, Any]]:
        """The live forks started from run ``run_id`` in ``namespace``, oldest first, at
        most ``limit``: each one's id, status, fork seq and creation time (0025's index)."""
        found = self.connection.execute(
            select(runs.c.id, runs.c.status, runs.c.fork_seq, runs.c.created_at)
            .where(runs.c.parent_run_id == run_id, runs.c.namespace == namespace)
            .order_by(runs.c.created_at, runs.c.id)
            .limit(limit)
        )
        return [
            {
                "run_id": row.id,
                "status": row.status,
                "fork_seq": row.fork_seq,
                "created_at": to_epoch(row.created_at),
            }
            for row in found
        ]

    def runs_by_requests(self, namespace: str, request_ids: Sequence[str]) -> list[RequestedRun]:
        """The runs these request ids already started in the namespace (one query for a
        whole batch)."""
        if not request_ids:
            return []
        found = self.connection.execute(
            select(
                runs.c.id,
                runs.c.workflow,
                runs.c.version,
                runs.c.input,
                runs.c.request_id,
                runs.c.webhook_url,
                runs.c.workflow_namespace,
            ).where(runs.c.namespace == namespace, runs.c.request_id.in_(list(request_ids)))
        )
        return [RequestedRun.of(row) for row in found]

    def run_head(self, run_id: str) -> RunHead | None:
        """A run's namespace, status, last seq and running nodes, without its cached
        state: what a progress stream polls."""
        row = self.connection.execute(
            select(runs.c.namespace, runs.c.status, runs.c.last_seq, runs.c.current).where(
                runs.c.id == run_id
            )
        ).first()
        return None if row is None else RunHead.of(row)

    def run_heads(self, run_ids: Sequence[str]) -> dict[str, RunHead]:
        """The heads of these runs, those that exist: one indexed read for all the runs
        a process's open streams follow."""
        if not run_ids:
            return {}
        found = self.connection.execute(
            select(
                runs.c.id, runs.c.namespace, runs.c.status, runs.c.last_seq, runs.c.current
            ).where(runs.c.id.in_(sorted(set(run_ids))))
        )
        return {row.id: RunHead.of(row) for row in found}

    def events_of_runs(
        self, after: Mapping[str, int], per_run: int
    ) -> dict[str, list[EventRecord]]:
        """For each run, its events after the seq given for it, at most ``per_run`` of
        them, oldest first: one read on the ``(run_id, seq)`` key for many runs."""
        if not after:
            return {}
        wanted = [
            and_(events.c.run_id == run_id, events.c.seq > seq, events.c.seq <= seq + per_run)
            for run_id, seq in sorted(after.items())
        ]
        query = select(
            events.c.run_id,
            events.c.seq,
            events.c.type,
            events.c.data,
            events.c.outcome,
            events.c.at,
        ).where(or_(*wanted))
        found: dict[str, list[EventRecord]] = {run_id: [] for run_id in after}
        for row in self.connection.execute(query.order_by(events.c.run_id, events.c.seq)):
            found[row.run_id].append(EventRecord.of(row))
        return found

    def pinned_versions(self, run_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Run id -> the workflow (qualified: ``acme/checkout``) and version it is pinned
        to, for those that exist: one read for a batch (recovery's, which needs each
        run's definition)."""
        if not run_ids:
            return {}
        found = self.connection.execute(
            select(runs.c.id, runs.c.workflow_namespace, runs.c.workflow, runs.c.version).where(
                runs.c.id.in_(sorted(set(run_ids)))
            )
        )
        return {
            row.id: (qualified(row.workflow_namespace, row.workflow), row.version) for row in found
        }

    def events_after(self, run_id: str, seq: int, upto: int | None = None) -> list[EventRecord]:
        query = select(
            events.c.seq, events.c.type, events.c.data, events.c.outcome, events.c.at
        ).where(events.c.run_id == run_id, events.c.seq > seq)
        if upto is not None:
            query = query.where(events.c.seq <= upto)
        return [
            EventRecord.of(row) for row in self.connection.execute(query.order_by(events.c.seq))
        ]

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

    def waiting_runs(self, namespace: str | None, limit: int) -> list[RunRecord]:
        """Runs parked for a person (a wait, a held node), longest waiting first."""
        query = select(runs).where(runs.c.status == "waiting")
        if namespace is not None:
            query = query.where(runs.c.namespace == namespace)
        waiting = self.connection.execute(query.order_by(runs.c.updated_at).limit(limit))
        return [RunRecord.of(row) for row in waiting]

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
        """Delete runs and everything kept for them — events, snapshots, executions with
        their checkpoints and model calls, outbox messages, timers, inbox entries,
        notifications — except the effects ledger, whose keys keep guarding the outside
        world against a late duplicate call, and model messages, which other runs' calls
        may name too."""
        if not run_ids:
            return 0
        ids = list(run_ids)
        kept = (
            events,
            snapshots,
            executions,
            checkpoints,
            model_calls,
            outbox,
            timers,
            inbox,
            notifications,
        )
        for table in kept:
            self.connection.execute(delete(table).where(table.c.run_id.in_(ids)))
        return int(self.connection.execute(delete(runs).where(runs.c.id.in_(ids))).rowcount)
