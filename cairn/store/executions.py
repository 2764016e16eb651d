"""The idempotency table and the durable timers: every guarded write that decides
which worker's result counts, whose claim is current, and that a timer fires once
(dialect-neutral; :mod:`cairn.store.postgres` overrides the hot path)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import delete, exists, select, update

from cairn.errors import StaleTransition
from cairn.model.keys import ExecutionKey
from cairn.model.statuses import ExecutionStatus
from cairn.store.base import TxBase
from cairn.store.clauses import ACTIVE_EXECUTION, unfinished, where
from cairn.store.records import ExecutionClaim, ExecutionRecord, from_epoch
from cairn.store.schema import (
    executions,
    runs,
    slot_waits,
    timers,
)

_SCHEDULED, _RUNNING = ExecutionStatus.SCHEDULED.value, ExecutionStatus.RUNNING.value
_HELD, _FAILED = ExecutionStatus.HELD.value, ExecutionStatus.FAILED.value


class ExecutionsTx(TxBase):
    """Executions (results, claims, holds, recoveries) and timers."""

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
        # Forward only: a dispatch to a key on record is the next attempt (a retry, an
        # operator's), never the same one again or an older one.
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
            where=executions.c.attempt < attempt,
        )

    def _moved(
        self,
        moved: int,
        key: ExecutionKey,
        target: ExecutionStatus,
        sources: Collection[str],
        *,
        missing_ok: bool = False,
    ) -> None:
        """The verdict on a guarded write that moved ``moved`` rows: done, or the row is
        already where it would have put it; anything else raises StaleTransition."""
        if moved:
            return
        found = self.connection.execute(
            select(executions.c.status, executions.c.attempt).where(where(key))
        ).first()
        if found is None and missing_ok:
            return
        if found is not None and found.status == target:
            return
        was = "no row" if found is None else f"{found.status} (attempt {found.attempt})"
        raise StaleTransition(
            f"execution {key} cannot become {target.value}: it is {was}, "
            f"not one of {', '.join(sorted(sources))}"
        )

    def set_execution_status(self, key: ExecutionKey, status: ExecutionStatus) -> None:
        """The run stopped waiting for an unfinished execution (cancelled, detached, timed
        out): a late result must not count. A key with no row (a wait) has nothing to stop."""
        moved = self.connection.execute(
            update(executions)
            .where(where(key), executions.c.status.in_(ACTIVE_EXECUTION))
            .values(status=status.value, finished_at=self.stamp())
        ).rowcount
        self._moved(moved, key, status, ACTIVE_EXECUTION, missing_ok=True)

    def hold_execution(self, key: ExecutionKey, attempt: int) -> None:
        """Recovery stops at this execution until an operator decides (see NodeHeld): it
        lost its worker (unfinished), or it is a compensation that failed for good."""
        sources = [*ACTIVE_EXECUTION, _FAILED]
        moved = self.connection.execute(
            update(executions)
            .where(where(key), executions.c.attempt == attempt, executions.c.status.in_(sources))
            .values(status=_HELD)
        ).rowcount
        self._moved(moved, key, ExecutionStatus.HELD, sources)

    def settle_execution(
        self, key: ExecutionKey, status: str, result: Mapping[str, Any] | None, error: str | None
    ) -> None:
        """Write an operator's settlement of a held execution, as a worker's result."""
        moved = self.connection.execute(
            update(executions)
            .where(where(key), executions.c.status == _HELD)
            .values(
                status=status,
                result=dict(result) if result is not None else None,
                error=error,
                worker="operator",
                finished_at=self.stamp(),
            )
        ).rowcount
        self._moved(moved, key, ExecutionStatus(status), [_HELD])

    def executions_of(self, run_id: str) -> list[ExecutionRecord]:
        found = self.connection.execute(
            select(executions)
            .where(executions.c.run_id == run_id)
            .order_by(executions.c.dispatched_at)
        )
        return [ExecutionRecord.of(row) for row in found]

    def stalled_executions(self, older_than: float, limit: int) -> list[ExecutionRecord]:
        """Dispatched, unfinished executions last (re)published before ``older_than``."""
        # An execution parked for a concurrency slot is not lost: it waits its turn.
        parked = exists().where(
            slot_waits.c.run_id == executions.c.run_id,
            slot_waits.c.node == executions.c.node,
            slot_waits.c.iteration == executions.c.iteration,
            slot_waits.c.phase == executions.c.phase,
        )
        found = self.connection.execute(
            select(executions)
            .where(
                executions.c.status.in_(ACTIVE_EXECUTION),
                executions.c.dispatched_at < from_epoch(older_than),
                ~parked,
            )
            .order_by(executions.c.dispatched_at)
            .limit(limit)
        )
        return [ExecutionRecord.of(row) for row in found]

    def stop_requested(self, key: ExecutionKey, attempt: int) -> bool:
        """Should the worker running this execution stop? Its run is being cancelled, or
        the run no longer waits for it (a join completed, a node timeout, a detach)."""
        row = self.connection.execute(
            select(
                runs.c.status, executions.c.status.label("execution_status"), executions.c.attempt
            )
            .join(executions, executions.c.run_id == runs.c.id)
            .where(where(key))
        ).first()
        return (
            row is None
            or row.status == "cancelling"
            or row.execution_status not in ACTIVE_EXECUTION
            or row.attempt != attempt
        )

    def claim_execution(
        self, key: ExecutionKey, attempt: int, fence: int, *, first: bool = False
    ) -> ExecutionClaim | None:
        """Record a claim (its fence) on the unfinished execution: it is running. None if
        it finished, a newer claim is recorded already, or — ``first`` — any worker has
        claimed this attempt before (it may have started: an irreversible node's rule)."""
        conditions = [unfinished(key, attempt), executions.c.fence < fence]
        if first:
            conditions.append(executions.c.status == _SCHEDULED)
        row = self.connection.execute(
            update(executions)
            .where(*conditions)
            .values(fence=fence, status=_RUNNING)
            .returning(executions.c.recoveries)
        ).first()
        return None if row is None else ExecutionClaim(int(row.recoveries))

    def execution(self, key: ExecutionKey) -> ExecutionRecord | None:
        row = self.connection.execute(select(executions).where(where(key))).first()
        return None if row is None else ExecutionRecord.of(row)

    def execution_fence(self, key: ExecutionKey) -> int:
        fence = self.connection.execute(select(executions.c.fence).where(where(key))).scalar()
        return int(fence or 0)

    def touch_execution(self, key: ExecutionKey, attempt: int, *, died: bool) -> int | None:
        """Restart an unfinished execution's recovery clock, counting the recovery if its
        worker died running it; the count, or None if it finished meanwhile."""
        row = self.connection.execute(
            update(executions)
            .where(unfinished(key, attempt))
            .values(
                dispatched_at=self.stamp(), recoveries=executions.c.recoveries + (1 if died else 0)
            )
            .returning(executions.c.recoveries)
        ).first()
        return None if row is None else int(row.recoveries)

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
