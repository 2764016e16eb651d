"""Concurrency limits: before its handler starts (in the worker), an execution takes a
slot of each pool its limits name (its node's ``concurrency``, its workflow's, and the
namespace's default); if one is full it is **parked** — recorded in ``slot_waits``, its
lease released, its message acknowledged — holding no worker and no broker message. A
holder that finishes gives its slots back and wakes as many waiters as its pools have
free slots, publishing their messages again; the scheduler does the same each pass for
every pool with waiters, which covers a holder that died (its slot went with its lease).

Slots are held by node leases — a holder is ``<lease key>|<token>`` — and only a live
lease counts (the port and the pools: :mod:`cairn.limits.concurrency`; the backends:
:mod:`cairn.lease.slots`). Compensations take no slot: they
are how a cancel or a rollback undoes work, and must not wait behind the work they undo.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cairn.decider.graph import Decision
from cairn.engine.outbox import Publisher
from cairn.limits.circuits import WAKE_ALL, Circuits, dependency_of
from cairn.limits.concurrency import Pool, Slots
from cairn.model.commands import CancelNode, DetachNode
from cairn.model.events import Phase
from cairn.model.keys import ExecutionKey
from cairn.model.messages import NodeMessage, message_namespace
from cairn.store.records import ParkedExecution
from cairn.store.sql import Store

log = logging.getLogger(__name__)


@dataclass
class SlotGate:
    """Taking, parking for, giving back and waking on concurrency slots. ``grace_s``: a
    woken execution that has not taken its slot after this long (its message was lost)
    is woken again; until then it holds its place in the pool."""

    slots: Slots
    store: Store
    publisher: Publisher
    grace_s: float = 60.0
    # Dependencies' circuits: their pools' limits follow their state, not their waiters'
    # record (see cairn.limits.circuits).
    circuits: Circuits | None = None

    def enter(
        self,
        message: NodeMessage,
        pools: Sequence[Pool],
        holder: str,
        namespace: str,
        priority: int = 0,
    ) -> bool:
        """Take a slot of every pool for ``holder``; False — parked — if one is full. A
        parked execution waits with its run's ``priority``: the higher is woken first."""
        if message.phase is not Phase.RUN:
            return True
        if not pools:  # a circuit it waited on closed meanwhile: its pools are none now
            if message.woken:
                with self.store.transaction() as tx:
                    tx.unpark(message.key)
            return True
        full = self.slots.take(pools, holder)
        if full is None:
            if message.woken:  # its wait is over: its place goes with its record
                with self.store.transaction() as tx:
                    tx.unpark(message.key)
            return True
        limits = dict(pools)
        while True:
            with self.store.transaction() as tx:
                tx.park(
                    message.key,
                    message.attempt,
                    namespace=namespace,
                    pool=full,
                    limit=limits[full],
                    priority=priority,
                    queue=message.queue,
                )
            # A holder may have given its slot back between the take and the park, and
            # found no waiter to wake: look once more, now that this one is on record.
            # Found full again, the pool it waits for is marked contended after its
            # record was written: whoever gives a slot of it back will find it.
            again = self.slots.take(pools, holder)
            if again is None:
                with self.store.transaction() as tx:
                    tx.unpark(message.key)
                return True
            if again == full:
                log.info("%s waits for a slot of %s (limit %d)", message.key, full, limits[full])
                return False
            full = again  # another of its pools filled meanwhile: it waits for that one

    def leave(self, pools: Sequence[Pool], holder: str) -> None:
        """Give ``holder``'s slots back and wake the waiters they free. A pool no taker
        has found full has nobody waiting: giving its slot back costs no database write."""
        if not pools:
            return
        contended = self.slots.give_back([pool for pool, _limit in pools], holder)
        if contended:
            freed = [(pool, limit) for pool, limit in pools if pool in contended]
            self.wake(self._current(freed), contended)

    def wake(self, pools: Sequence[Pool], contended: Mapping[str, int] | None = None) -> int:
        """Publish again as many waiters of each pool as it has free slots; how many.
        A pool of ``contended`` (its contention counter read before looking) left with
        no waiter is settled: nobody needs waking until a taker finds it full again."""
        holders = self.slots.holders([pool for pool, _limit in pools])
        woken: list[ParkedExecution] = []
        for pool, limit in pools:
            free = limit - holders.get(pool, 0)
            if free <= 0:
                continue
            contention = (contended or {}).get(pool)
            with self.store.transaction() as tx:
                woken += tx.wake(pool, free, self.grace_s)
                idle = contention is not None and not tx.unwoken(pool, self.grace_s)
            if idle and contention is not None:
                # A waiter parking meanwhile found the pool full after the counter was
                # read (its take before parking, or its second after): settle refuses.
                self.slots.settle(pool, contention)
        self._publish(woken)
        return len(woken)

    def _publish(self, parked: Sequence[ParkedExecution]) -> None:
        messages = [
            NodeMessage(
                p.run_id,
                p.workflow,
                p.version,
                p.node,
                p.iteration,
                p.attempt,
                Phase(p.phase),
                woken=True,
                queue=p.queue,
                priority=p.priority,
                namespace=message_namespace(p.namespace) if p.namespace else None,
            )
            for p in parked
        ]
        if messages and not self.publisher.publish(messages):
            # Their wait is over on record: woken again after the grace, or recovered.
            log.warning("%d woken execution(s) not published", len(messages))

    def parked(self, key: ExecutionKey) -> None:
        """The worker that parked ``key`` has let its lease go. A wake published while it
        still held it met that lease and was dropped, and a stop that came before the
        waiter was on record found nobody to wake: either way, publish it again now,
        lest it wait for the grace, or for a slot it no longer needs."""
        with self.store.transaction() as tx:
            woken = tx.woken_or_stopped(key)
        self._publish(woken)

    def wake_stopped(self, run_id: str, decision: Decision) -> None:
        """An after-commit hook: executions a decision stops (a cancel, a timeout, a join
        that no longer needs them) that wait for a slot are published at once, so that
        they end now — answered ``cancelled`` by the worker — not when a slot frees."""
        keys = [
            ExecutionKey(run_id, command.node, command.iteration, Phase.RUN.value)
            for command in decision.commands
            if isinstance(command, CancelNode | DetachNode)
        ]
        if not keys:
            return
        with self.store.transaction() as tx:
            parked = tx.wake_executions(keys)
        self._publish(parked)

    def wake_waiting(self) -> int:
        """Wake what every pool with waiters has room for (the scheduler's pass: a dead
        holder's slot is free once its lease has expired, and nobody else will say so)."""
        with self.store.reading() as tx:
            waiting = tx.waiting_pools()
        if not waiting:
            return 0
        with self.store.transaction() as tx:
            tx.forget_finished_waiters()
        return self.wake(self._current([(pool.pool, pool.limit) for pool in waiting]))

    def _current(self, pools: Sequence[Pool]) -> list[Pool]:
        """These pools with a circuit's at its limit now: all its waiters once it is
        closed, one (the probe) half-open, and none — left out — while it is open."""
        names = [name for pool, _limit in pools if (name := dependency_of(pool)) is not None]
        if not names:
            return list(pools)
        limits = self.circuits.limits(names) if self.circuits is not None else {}
        current = []
        for pool, limit in pools:
            name = dependency_of(pool)
            if name is None:
                current.append((pool, limit))
            elif name in limits and (now := limits[name]) != 0:
                current.append((pool, WAKE_ALL if now is None else now))
        return current
