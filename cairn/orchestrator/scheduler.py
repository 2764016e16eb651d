"""The scheduler: the outbox relay, durable timers, recovery, snapshot compaction.

It never runs handlers; everything it does goes through the orchestrator's normal write
path, so running it twice, or several schedulers at once, is harmless:

- **relay**: outbox rows a crash left unpublished are claimed with ``FOR UPDATE SKIP
  LOCKED``, published, and marked sent in the same transaction;
- **inbox**: events one run left for another (a child's end, a parent's cancel) that
  were not applied right after their commit are applied, each once;
- **timers**: a due timer is taken (deleted) in the same transaction as the advance
  it causes, after the run row is locked — so it fires exactly once, late timers
  included, and a worker advancing the same run is never deadlocked against it; a run
  another transaction holds is skipped and looked at again a moment later, so several
  schedulers share the due timers instead of queueing on the same ones; an idle
  scheduler sleeps until the next timer is due, at most one interval;
- **recovery**: a claim whose lease ran out without a release (its worker died, or was
  paused past its TTL) is found within one pass, by Redis's clock; an execution
  dispatched long ago, unfinished, with no live lease (its message was lost, or Redis
  lost its claims) by the older sweep. Either is published again under the same key —
  unless that needs a person: an irreversible node a worker had claimed, or a node that
  keeps killing its workers, is *held* and the run waits for an operator's decision
  (:mod:`cairn.orchestrator.recovery`);
- **stalls**: a running execution whose heartbeats arrive but whose progress has not
  moved for its node's ``stall_after`` is flagged, once (an event, a metric, ``cairn
  status``); nothing is stopped — a person looks;
- **compaction**: old snapshots are thinned (the event log is kept);
- **retention**: the artifacts of runs that ended longer ago than
  ``CAIRN_ARTIFACTS_RETENTION_DAYS``, then runs that ended longer ago than
  ``CAIRN_RUN_RETENTION_S``, are deleted with their history (each off by default).

Webhook notifications are delivered beside it, by :mod:`cairn.webhooks.notifier`.
Recovery never sends again an execution nobody claimed while the queue still holds
messages (it is most likely one of them), unless it has waited far longer.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

from cairn.artifacts.cleanup import expire as expire_artifacts
from cairn.artifacts.registry import ArtifactRegistry
from cairn.artifacts.stores import open_store
from cairn.config import Settings
from cairn.faults import fault_point
from cairn.lease.leases import Lapsed, Leases, lease_key, parse_lease_key
from cairn.orchestrator.engine import Orchestrator
from cairn.orchestrator.events import Phase, TimerFired
from cairn.orchestrator.messages import NodeMessage
from cairn.orchestrator.metrics import SchedulerMetrics
from cairn.orchestrator.recovery import Outcome, RecoveryPolicy
from cairn.orchestrator.state import TimerKind
from cairn.reconnect import is_outage
from cairn.store.repository import ExecutionKey, Tx, to_epoch

log = logging.getLogger(__name__)

BATCH = 500
OUTAGE_MAX_WAIT_S = 5.0
COMPACT_EVERY_PASSES = 120
SKIPPED_TIMER_RETRY_S = 0.01
STALL_CHECK_EVERY_S = 2.0  # stall_after is minutes in practice; reading every claim costs
# A never-claimed execution is dispatched again only when the queue is empty (else its
# message is most likely still waiting in it), or once it has waited this many times
# CAIRN_RECOVERY_AFTER (a message lost while the queue was never empty).
QUEUED_PATIENCE = 10


def _timer_fired(timer_id: str, at: float) -> TimerFired:
    return TimerFired(at=at, timer_id=timer_id)


def _take_timer(run_id: str, timer_id: str, tx: Tx) -> bool:
    return tx.take_timer(run_id, timer_id)


@dataclass
class PassReport:
    relayed: int = 0
    delivered: int = 0
    fired: int = 0
    recovered: int = 0
    compacted: int = 0
    expired: int = 0

    def __bool__(self) -> bool:
        return bool(
            self.relayed
            or self.delivered
            or self.fired
            or self.recovered
            or self.compacted
            or self.expired
        )


@dataclass
class Scheduler:
    orchestrator: Orchestrator
    leases: Leases
    settings: Settings
    relay_after: float | None = None  # seconds; default from settings
    metrics: SchedulerMetrics = field(default_factory=SchedulerMetrics)
    _passes: int = field(default=0, init=False)
    _next_timer_at: float | None = field(default=None, init=False)  # time.monotonic()
    _next_stall_check: float = field(default=0.0, init=False)  # time.monotonic()
    policy: RecoveryPolicy = field(init=False)

    def __post_init__(self) -> None:
        self.policy = RecoveryPolicy(self.orchestrator, self.settings)

    def run_once(self) -> PassReport:
        report = PassReport(
            relayed=self.relay(),
            delivered=self.deliver(),
            fired=self.fire_timers(),
            recovered=self.recover(),
        )
        if time.monotonic() >= self._next_stall_check:
            self._next_stall_check = time.monotonic() + STALL_CHECK_EVERY_S
            self.flag_stalls()
        self._passes += 1
        if self._passes % COMPACT_EVERY_PASSES == 0:
            report.compacted = self.compact()
            report.expired = self.expire()
        self.orchestrator.flush_sent()
        return report

    def run_forever(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                report = self.run_once()
            except Exception as error:
                failures += 1
                if not is_outage(error):
                    log.exception("scheduler pass failed")
                # Back off while PostgreSQL or Redis is away (full jitter: several
                # schedulers do not come back in step); every pass is safe to repeat.
                delay = random.uniform(0, min(OUTAGE_MAX_WAIT_S, 0.1 * 2 ** min(failures, 10)))
                log.warning("scheduler pass %d failed (%s); next in %.2f s", failures, error, delay)
                stop.wait(max(delay, self.settings.scheduler_interval))
                continue
            if failures:
                log.info("scheduler back after %d failed pass(es)", failures)
                failures = 0
            if not report:
                stop.wait(self.idle_wait())

    def relay(self) -> int:
        relay_after = (
            self.relay_after if self.relay_after is not None else self.settings.outbox_relay_after
        )
        store = self.orchestrator.store
        with store.reading() as tx:  # an idle pass costs no commit
            if not tx.has_unsent(tx.now() - relay_after):
                return 0
        with store.transaction() as tx:
            rows = tx.claim_unsent(tx.now() - relay_after, BATCH)
            if not rows:
                return 0
            messages = [
                NodeMessage(
                    **{**row.payload, "phase": Phase(row.payload["phase"]), "outbox_id": row.id}
                )
                for row in rows
            ]
            if not self.orchestrator.publisher.publish(messages):
                return 0
            fault_point("relay.after_publish")
            tx.mark_sent([row.id for row in rows])
        self.metrics.relayed.inc(len(rows))
        log.info("relayed %d unsent message(s)", len(rows))
        return len(rows)

    def deliver(self) -> int:
        with self.orchestrator.store.reading() as tx:
            posted = tx.posted(BATCH)
        return sum(self.orchestrator.deliver(entry.id, entry.run_id) for entry in posted)

    def fire_timers(self) -> int:
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
        node = self.orchestrator.registry.get(run.workflow, run.version).nodes.get(node_id)
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

    def recover(self) -> int:
        """Dispatch again what has no result and no live lease, unless recovery needs a
        person (see :mod:`cairn.orchestrator.recovery`): first the claims whose lease ran
        out unreleased — found within one pass of their expiry — then what was
        dispatched more than ``CAIRN_RECOVERY_AFTER`` ago and never claimed (its message
        was lost), or whose claim Redis no longer knows."""
        recovered = 0
        for lapsed in self.leases.lapsed(BATCH):
            try:
                recovered += self._recover_lapsed(lapsed)
            except Exception as error:  # it comes back to be taken again
                if is_outage(error):
                    raise
                log.exception("recovering the lapsed claim %s failed", lapsed.key)
                continue
            self.leases.settle_lapsed(lapsed.key)
        store = self.orchestrator.store
        with store.reading() as tx:
            now = tx.now()
            stalled = tx.stalled_executions(now - self.settings.recovery_after, BATCH)
        backlog: int | None = None  # asked of the broker once per pass, if needed
        for execution in stalled:
            lease = lease_key(
                execution.run_id, execution.node, execution.iteration, execution.phase
            )
            if self.leases.held(lease):
                continue  # a live worker holds it
            died = self.leases.beats([lease])[0] is not None
            if not died and self._maybe_queued(execution, now):
                if backlog is None:
                    backlog = self.orchestrator.publisher.backlog() or 0
                if backlog:
                    continue  # never started, and the queue is not empty: still queued
            if died:
                self.leases.forget(lease)  # the next death must leave a record of its own
            recovered += self._recover_one(execution, died=died)
        return recovered

    def _recover_lapsed(self, lapsed: Lapsed) -> int:
        """A claim whose holder died (or was paused past its lease): taken from Redis
        once, fleet-wide, so its death is counted once. An older attempt's claim is not
        the execution's any more (it timed out; a newer attempt is on its way)."""
        key = ExecutionKey(*parse_lease_key(lapsed.key))
        with self.orchestrator.store.reading() as tx:
            execution = tx.execution(key)
        if execution is None or execution.status not in ("scheduled", "running"):
            return 0
        attempt = (lapsed.record or {}).get("attempt")
        if attempt is not None and str(attempt) != str(execution.attempt):
            return 0
        return self._recover_one(execution, died=True)

    def _recover_one(self, execution: Any, *, died: bool) -> int:
        key = ExecutionKey(execution.run_id, execution.node, execution.iteration, execution.phase)
        with self.orchestrator.store.transaction() as tx:
            recoveries = tx.touch_execution(key, execution.attempt, died=died)
            if recoveries is None:
                return 0  # it finished meanwhile
            run = tx.run(execution.run_id)
        message = NodeMessage(
            execution.run_id,
            run.workflow,
            run.version,
            execution.node,
            execution.iteration,
            execution.attempt,
            Phase(execution.phase),
            resumed=True,
        )
        node = self.orchestrator.registry.get(run.workflow, run.version).nodes.get(execution.node)
        outcome = self.policy.settle(
            message,
            node,
            claimed=execution.status == "running",
            died=died,
            recoveries=recoveries,
            worker="scheduler",
        )
        if outcome is not Outcome.RUN:
            self.metrics.recoveries.labels(outcome.value).inc()
            return 1
        self.metrics.recoveries.labels("redispatched").inc()
        cause = "worker died" if died else "never claimed or message lost"
        self.orchestrator.record_recovery(message, cause=cause, recoveries=recoveries)
        self.orchestrator.publisher.publish([message])
        log.warning(
            "recovered %s attempt %d (%s): no lease, no result; dispatched again",
            key,
            execution.attempt,
            "its worker died" if died else "never claimed or message lost",
        )
        return 1

    def flag_stalls(self) -> int:
        """Flag, once each, the running executions whose node declares ``stall_after``
        and whose progress has not moved for that long (Redis's clock, from the claim or
        the last ``ctx.progress``). Returns how many were flagged now."""
        keys = self.leases.claims()
        flagged = 0
        for key, record in zip(keys, self.leases.beats(keys) if keys else [], strict=True):
            if record is None or record.get("stalled") or "workflow" not in record:
                continue
            run_id, node_id, iteration, phase = parse_lease_key(key)
            try:
                definition = self.orchestrator.registry.get(
                    record["workflow"], int(record["version"])
                )
            except Exception:  # a workflow this scheduler cannot load: not its call
                log.debug("no definition for claim %s", key, exc_info=True)
                continue
            node = definition.nodes.get(node_id)
            stall_after = getattr(node, "stall_after", None)
            idle = float(record.get("progress_age_s", 0.0))
            if stall_after is None or idle < stall_after.total_seconds():
                continue
            if not self.leases.flag_stalled(key):
                continue  # another scheduler flagged it first
            flagged += 1
            self.metrics.stalled.labels(definition.name).inc()
            log.warning(
                "%s/%s#%d (%s) stalled: heartbeats arrive, no progress for %.0f s on %s",
                run_id,
                node_id,
                iteration,
                phase,
                idle,
                record.get("worker"),
            )
            self.orchestrator.record(
                run_id,
                "node_stalled",
                {
                    "node": node_id,
                    "iteration": iteration,
                    "attempt": int(record.get("attempt", 0)),
                    "phase": phase,
                    "worker": record.get("worker"),
                    "no_progress_s": round(idle, 3),
                    "stall_after_s": stall_after.total_seconds(),
                },
            )
        return flagged

    def _maybe_queued(self, execution: Any, now: float) -> bool:
        """Nobody has started it (no claim in PostgreSQL, no heartbeat record), and it
        has not waited so long that a queue could no longer explain it."""
        waited = now - to_epoch(execution.dispatched_at)
        return bool(
            execution.status == "scheduled"
            and waited < QUEUED_PATIENCE * self.settings.recovery_after
        )

    def expire(self) -> int:
        """Delete the artifacts of runs that ended longer ago than
        CAIRN_ARTIFACTS_RETENTION_DAYS, then runs that ended longer ago than
        CAIRN_RUN_RETENTION_S (each if set), a batch per pass; returns how many runs.
        (Orphan blobs are left to ``cairn artifacts-cleanup``: finding them lists the
        whole object store.)"""
        days = self.settings.artifacts_retention_days
        if days is not None:
            expire_artifacts(
                ArtifactRegistry(self.orchestrator.store),
                open_store(self.settings.effective_artifacts_url),
                timedelta(days=days),
                batch=BATCH,
                max_batches=1,
            )
        retention = self.settings.run_retention_s
        if not retention:
            return 0
        with self.orchestrator.store.transaction() as tx:
            expired = tx.delete_runs(tx.expired_runs(tx.now() - retention, BATCH))
        if expired:
            log.info("deleted %d run(s) that ended over %.0f s ago", expired, retention)
        return expired

    def compact(self) -> int:
        """Keep the newest snapshots of each run, and one per stretch of older history, so
        that state at any seq replays a bounded number of events."""
        keep_newest = self.settings.snapshot_keep
        stretch = 10 * self.settings.snapshot_every_events
        store = self.orchestrator.store
        with store.reading() as tx:
            crowded = tx.runs_with_snapshots_over(keep_newest, BATCH)
        deleted = 0
        for run_id in crowded:
            with store.transaction() as tx:
                seqs = tx.snapshot_seqs(run_id)
                old = seqs[:-keep_newest]
                kept_stretches: set[int] = set()
                doomed = []
                for seq in old:
                    if seq // stretch in kept_stretches:
                        doomed.append(seq)
                    else:
                        kept_stretches.add(seq // stretch)
                deleted += tx.delete_snapshots(run_id, doomed)
        return deleted
