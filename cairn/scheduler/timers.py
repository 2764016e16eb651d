"""Durable timers, fired exactly once.

A due timer is taken (deleted) in the same transaction as the advance it causes, after
the run row is locked — so it fires exactly once, late timers included, and a worker
advancing the same run is never deadlocked against it. A run another transaction holds is
skipped and looked at again a moment later, so several schedulers share the due timers
instead of queueing on the same ones; an idle scheduler sleeps until the next timer is
due, at most one interval. A node's timeout counts from its start: its timer is moved on
while the attempt has not run that long (by Redis's clock).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cairn.config import Settings
from cairn.engine.orchestrator import Orchestrator
from cairn.lease.port import Leases
from cairn.model.events import Phase, TimerFired
from cairn.model.keys import lease_key
from cairn.model.state import TimerKind
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.store.records import to_epoch
from cairn.store.sql import Tx

BATCH = 500
SKIPPED_TIMER_RETRY_S = 0.01


def _timer_fired(timer_id: str, at: float) -> TimerFired:
    return TimerFired(at=at, timer_id=timer_id)


def _take_timer(run_id: str, timer_id: str, tx: Tx) -> bool:
    return tx.take_timer(run_id, timer_id)


@dataclass
class Timers:
    orchestrator: Orchestrator
    leases: Leases
    settings: Settings
    metrics: SchedulerMetrics
    _next_timer_at: float | None = field(default=None, init=False)  # time.monotonic()

    def fire(self) -> int:
        """Fire the due timers, soonest first, and note when the next one comes due (an
        idle scheduler wakes up for it instead of sleeping a whole interval). A run
        another scheduler is advancing is skipped, not waited for: several schedulers
        leapfrog one another through the due timers instead of queueing on the same."""
        interval = self.settings.scheduler_interval
        with self.orchestrator.store.reading() as tx:
            now = tx.now()
            timers = tx.due_timers(now + interval, BATCH)
        read_at = time.monotonic()
        # Soonest first: the due ones, then (if any) the next to come due.
        due = [t for t in timers if to_epoch(t.due_at) <= now]
        upcoming = timers[len(due)] if len(due) < len(timers) else None
        self._next_timer_at = (
            read_at + to_epoch(upcoming.due_at) - now if upcoming is not None else None
        )
        fired = 0
        for timer in due:
            if self._postponed(timer):
                continue
            decision = self.orchestrator.apply(
                timer.run_id,
                partial(_timer_fired, timer.timer_id),
                before=partial(_take_timer, timer.run_id, timer.timer_id),
                skip_locked=True,
            )
            if decision is not None:
                fired += 1
                fired_at = now + time.monotonic() - read_at  # by the database's clock
                self.metrics.timer_fired(timer.timer_id, fired_at - to_epoch(timer.due_at))
            else:  # taken by another scheduler, or its run was busy: look again soon
                self._next_timer_at = time.monotonic() + SKIPPED_TIMER_RETRY_S
        return fired

    def _postponed(self, timer: Any) -> bool:
        """A node's timeout counts from its start, not its dispatch: time spent queued
        for a worker is not execution. When a node-timeout timer comes due, the attempt
        is asked how long it has been running (by Redis's clock, from its claim); one
        that has run less than its timeout, or not started at all, moves the timer on
        (by the database's clock) instead of failing. A worker stops its handler at the
        timeout itself; this timer is for the attempt that could not be stopped."""
        kind, _, rest = timer.timer_id.partition(":")
        if kind != TimerKind.NODE_TIMEOUT.value:
            return False
        node_id, iteration, attempt = rest.rsplit(":", 2)
        with self.orchestrator.store.reading() as tx:
            run = tx.run(timer.run_id)
            now = tx.now()
        if run is None:
            return False
        node = self.orchestrator.registry.get(run.workflow_ref, run.version).nodes.get(node_id)
        if node is None or node.timeout is None:
            return False
        timeout = node.timeout.total_seconds()
        lease = lease_key(timer.run_id, node_id, int(iteration), Phase.RUN.value)
        record = self.leases.beats([lease])[0] if self.leases.held(lease) else None
        started = record is not None and str(record.get("attempt")) == attempt
        running = float(record["running_s"]) if started and record is not None else 0.0
        if running >= timeout:
            return False
        with self.orchestrator.store.transaction() as tx:
            return tx.postpone_timer(timer.run_id, timer.timer_id, now + timeout - running)

    def idle_wait(self) -> float:
        """How long an idle scheduler sleeps: one interval, or until the next timer."""
        wait = self.settings.scheduler_interval
        if self._next_timer_at is not None:
            wait = min(wait, max(0.0, self._next_timer_at - time.monotonic()))
        return wait
