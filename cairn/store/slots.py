"""Who waits for a concurrency slot (``slot_waits``): executions parked while their pool
is full, woken — published again — in order of priority, then age. A woken execution's
row stays, marked ``woken_at``, until its worker has the slot (:meth:`SlotsTx.unpark`):
on its way, it holds its place in the pool; woken longer ago than the grace (its message
lost), it is woken again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, exists, func, or_, select, update

from cairn.model.keys import ExecutionKey
from cairn.model.statuses import RunStatus
from cairn.model.workflow_names import qualified
from cairn.store.base import TxBase
from cairn.store.clauses import ACTIVE_EXECUTION, where
from cairn.store.records import ParkedExecution, WaitingPool, from_epoch
from cairn.store.schema import executions, runs, slot_waits

# A run that still wants its nodes run: not being stopped, not ended.
GOING_ON = tuple(
    status.value
    for status in RunStatus
    if not status.terminal and status is not RunStatus.CANCELLING
)


def _waiter(key: ExecutionKey) -> list[Any]:
    return [
        slot_waits.c.run_id == key.run_id,
        slot_waits.c.node == key.node,
        slot_waits.c.iteration == key.iteration,
        slot_waits.c.phase == key.phase,
    ]


class SlotsTx(TxBase):
    """The slot_waits table."""

    def park(
        self,
        key: ExecutionKey,
        attempt: int,
        *,
        namespace: str,
        pool: str,
        limit: int,
        priority: int = 0,
        queue: str | None = None,
    ) -> None:
        """Record that execution ``key`` waits for a slot of ``pool`` (kept since it
        first waited, if it waits again)."""
        insert = self._insert(slot_waits).values(
            run_id=key.run_id,
            node=key.node,
            iteration=key.iteration,
            phase=key.phase,
            attempt=attempt,
            namespace=namespace,
            pool=pool,
            pool_limit=limit,
            priority=priority,
            waiting_since=self.stamp(),
            queue=queue,
        )
        self.connection.execute(
            insert.on_conflict_do_update(
                index_elements=["run_id", "node", "iteration", "phase"],
                set_={"attempt": attempt, "pool": pool, "pool_limit": limit, "woken_at": None},
            )
        )

    def unpark(self, key: ExecutionKey) -> bool:
        """It no longer waits (it got its slots); False if it was not waiting."""
        return bool(self.connection.execute(delete(slot_waits).where(*_waiter(key))).rowcount)

    def wake(self, pool: str, free: int, grace_s: float) -> list[ParkedExecution]:
        """Mark woken, for publishing again, as many of ``pool``'s waiters as its
        ``free`` slots less those woken within ``grace_s`` (still on their way) — the
        highest priority first, then the longest waiting. Their dispatch clock restarts
        (recovery measures from it)."""
        since = from_epoch(self.now() - grace_s)
        on_the_way = self.connection.execute(
            select(func.count())
            .select_from(slot_waits)
            .where(slot_waits.c.pool == pool, slot_waits.c.woken_at >= since)
        ).scalar_one()
        count = free - int(on_the_way)
        if count <= 0:
            return []
        chosen = self._skip_locked(
            select(slot_waits)
            .where(
                slot_waits.c.pool == pool,
                or_(slot_waits.c.woken_at.is_(None), slot_waits.c.woken_at < since),
            )
            .order_by(slot_waits.c.priority.desc(), slot_waits.c.waiting_since)
            .limit(count)
        )
        return self._woken(list(self.connection.execute(chosen)))

    def _woken(self, rows: Sequence[Any]) -> list[ParkedExecution]:
        """Mark these waiters woken, their dispatch clock restarted (recovery measures
        from it); what it takes to publish each again."""
        woken = []
        for row in rows:
            key = ExecutionKey(row.run_id, row.node, row.iteration, row.phase)
            self.connection.execute(
                update(slot_waits).where(*_waiter(key)).values(woken_at=self.stamp())
            )
            self.connection.execute(
                update(executions).where(where(key)).values(dispatched_at=self.stamp())
            )
            found = self.connection.execute(
                select(runs.c.workflow_namespace, runs.c.workflow, runs.c.version).where(
                    runs.c.id == row.run_id
                )
            ).first()
            if found is None:  # the run is gone (retention): nothing to wake
                self.connection.execute(delete(slot_waits).where(*_waiter(key)))
                continue
            woken.append(
                ParkedExecution(
                    row.run_id,
                    qualified(found.workflow_namespace, found.workflow),
                    found.version,
                    row.node,
                    row.iteration,
                    row.phase,
                    row.attempt,
                    row.queue,
                    row.namespace,
                    row.priority,
                )
            )
        return woken

    def unwoken(self, pool: str, grace_s: float) -> int:
        """How many of ``pool``'s waiters are not on their way to a worker."""
        since = from_epoch(self.now() - grace_s)
        return int(
            self.connection.execute(
                select(func.count())
                .select_from(slot_waits)
                .where(
                    slot_waits.c.pool == pool,
                    or_(slot_waits.c.woken_at.is_(None), slot_waits.c.woken_at < since),
                )
            ).scalar_one()
        )

    def wake_executions(self, keys: Sequence[ExecutionKey]) -> list[ParkedExecution]:
        """Mark woken those of these executions that wait for a slot, whatever their
        pool's room (they are being stopped: published so that they end)."""
        woken = []
        for key in keys:
            row = self.connection.execute(select(slot_waits).where(*_waiter(key))).first()
            if row is not None:
                woken += self._woken([row])
        return woken

    def woken_or_stopped(self, key: ExecutionKey) -> list[ParkedExecution]:
        """This waiter, marked woken again, if a wake came while its worker still held
        its lease (that wake met the lease and was dropped) or its run is being stopped
        or its execution was (a stop that came before the waiter was on record); else
        nothing: it waits on."""
        row = self.connection.execute(select(slot_waits).where(*_waiter(key))).first()
        if row is None:
            return []
        if row.woken_at is None:
            wanted = self.connection.execute(
                select(executions.c.attempt)
                .join(runs, runs.c.id == executions.c.run_id)
                .where(
                    where(key),
                    executions.c.status.in_(ACTIVE_EXECUTION),
                    runs.c.status.in_(GOING_ON),
                )
            ).first()
            if wanted is not None and wanted.attempt == row.attempt:
                return []
        return self._woken([row])

    def forget_finished_waiters(self, limit: int = 1000) -> int:
        """Drop the waits of executions that finished or were superseded meanwhile (a run
        cancelled while it waited): nothing will take their slot."""
        active = exists().where(
            executions.c.run_id == slot_waits.c.run_id,
            executions.c.node == slot_waits.c.node,
            executions.c.iteration == slot_waits.c.iteration,
            executions.c.phase == slot_waits.c.phase,
            executions.c.attempt == slot_waits.c.attempt,
            executions.c.status.in_(ACTIVE_EXECUTION),
        )
        stale = (
            select(
                slot_waits.c.run_id, slot_waits.c.node, slot_waits.c.iteration, slot_waits.c.phase
            )
            .where(~active)
            .limit(limit)
        )
        gone = 0
        for row in list(self.connection.execute(stale)):
            key = ExecutionKey(row.run_id, row.node, row.iteration, row.phase)
            gone += self.connection.execute(delete(slot_waits).where(*_waiter(key))).rowcount
        return gone

    def waiting_pools(self, limit: int = 1000) -> list[WaitingPool]:
        """The pools executions wait on, with how many and since when."""
        rows = self.connection.execute(
            select(
                slot_waits.c.pool,
                func.max(slot_waits.c.pool_limit).label("pool_limit"),
                func.count().label("waiting"),
                func.min(slot_waits.c.waiting_since).label("oldest"),
            )
            .group_by(slot_waits.c.pool)
            .order_by(slot_waits.c.pool)
            .limit(limit)
        )
        return [WaitingPool(r.pool, int(r.pool_limit), int(r.waiting), r.oldest) for r in rows]

    def parked(self, key: ExecutionKey) -> bool:
        found = self.connection.execute(select(slot_waits.c.pool).where(*_waiter(key))).first()
        return found is not None
