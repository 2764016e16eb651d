"""Recovery: executions that lost their worker run again — or wait for a person.

Recovery re-dispatches rather than running anything itself, so that every recovered
execution goes through the same lease, fence and conditional commit as a fresh one: a
recovery sent twice is a duplicate the lease turns away, and two schedulers at once are
safe. A claim whose lease ran out unreleased (its worker died, or was paused past its
TTL) is found within one pass, by Redis's clock; an execution dispatched long ago with no
result and no live lease (its message was lost, or Redis lost its claims) by the older
sweep. Each death counts against CAIRN_MAX_RECOVERIES, and what needs a person — an
irreversible node a worker had claimed, a node that keeps killing its workers — is held
(:mod:`cairn.engine.recovery`). Never sends again an execution nobody claimed
while its queue still holds messages (it is most likely one of them), unless it has
waited far longer — its build's queue, for a run routed to a build — nor one waiting for
a worker of its run's build while none is live.

Stalls are watched here too: a running execution whose heartbeats arrive but whose
progress has not moved for its node's ``stall_after`` is flagged, once (an event, a
metric, ``cairn status``); nothing is stopped — a person looks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from cairn.config import Settings
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.recovery import Outcome, RecoveryPolicy
from cairn.lease.port import Lapsed, Leases
from cairn.model.builds import build_queue
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.keys import ExecutionKey, lease_key, parse_lease_key
from cairn.model.messages import NodeMessage, message_namespace
from cairn.model.statuses import ExecutionStatus
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.reconnect import is_outage
from cairn.store.records import ExecutionRecord, to_epoch

log = logging.getLogger(__name__)

BATCH = 500
# A never-claimed execution is dispatched again only when its queue is empty (else its
# message is most likely still waiting in it), or once it has waited this many times
# CAIRN_RECOVERY_AFTER (a message lost while the queue was never empty).
QUEUED_PATIENCE = 10
# The cause a recovery records (``audit.recovered``) when no worker had claimed the
# execution: its message may have been lost — or taken by a worker that had not yet
# claimed it, which this cannot see (the copy sent again then meets that claim).
NEVER_CLAIMED = "never claimed or message lost"


@dataclass
class Recovery:
    orchestrator: Orchestrator
    leases: Leases
    settings: Settings
    metrics: SchedulerMetrics
    policy: RecoveryPolicy = field(init=False)

    def __post_init__(self) -> None:
        self.policy = RecoveryPolicy(self.orchestrator.steps, self.settings)

    def recover(self) -> int:
        """Dispatch again what has no result and no live lease, unless recovery needs a
        person (see :mod:`cairn.engine.recovery`): first the claims whose lease ran
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
        backlogs: dict[str | None, int] = {}  # asked of the broker once per queue and pass
        queues: dict[tuple[str, str], str | None] | None = None  # read once per pass
        for execution in stalled:
            lease = lease_key(
                execution.run_id, execution.node, execution.iteration, execution.phase
            )
            if self.leases.held(lease):
                continue  # a live worker holds it
            died = self.leases.beats([lease])[0] is not None
            if not died and self._waits_for_build(execution):
                continue  # no live worker of its run's build: it waits for one
            if not died and self._maybe_queued(execution, now):
                # Its own queue's: a node waiting for the one GPU worker is not lost
                # because the default queue is empty.
                if queues is None:
                    queues = self._queues_of(stalled)
                queue = queues.get((execution.run_id, execution.node))
                if queue not in backlogs:
                    backlogs[queue] = self.orchestrator.publisher.backlog(queue) or 0
                if backlogs[queue]:
                    continue  # never started, and the queue is not empty: still queued
            if not died:
                recovered += self._recover_one(execution, died=False)
                continue
            # The record goes now (the next death must leave one of its own); the claim
            # stays, held back, until the recovery is counted, so that a worker claiming
            # the lease meanwhile still runs it as resumed.
            if not self.leases.forget(lease):
                continue  # a worker claimed it first: the takeover, and its count, are its
            recovered += self._recover_one(execution, died=True)
            self.leases.settle_lapsed(lease)
        return recovered

    def _recover_lapsed(self, lapsed: Lapsed) -> int:
        """A claim whose holder died (or was paused past its lease): taken from Redis
        once, fleet-wide, so its death is counted once. An older attempt's claim is not
        the execution's any more (it timed out; a newer attempt is on its way)."""
        key = ExecutionKey(*parse_lease_key(lapsed.key))
        with self.orchestrator.store.reading() as tx:
            execution = tx.execution(key)
        if execution is None or not execution.status.active:
            return 0
        attempt = (lapsed.record or {}).get("attempt")
        if attempt is not None and str(attempt) != str(execution.attempt):
            return 0
        return self._recover_one(execution, died=True)

    def _recover_one(self, execution: ExecutionRecord, *, died: bool) -> int:
        key = ExecutionKey(execution.run_id, execution.node, execution.iteration, execution.phase)
        with self.orchestrator.store.transaction() as tx:
            recoveries = tx.touch_execution(key, execution.attempt, died=died)
            if recoveries is None:
                return 0  # it finished meanwhile
            run = tx.run(execution.run_id)
        if run is None:
            return 0
        definition = self.orchestrator.registry.get(run.workflow_ref, run.version)
        message = NodeMessage(
            execution.run_id,
            run.workflow_ref,
            run.version,
            execution.node,
            execution.iteration,
            execution.attempt,
            Phase(execution.phase),
            resumed=True,
            queue=definition.queue_of(execution.node),
            priority=run.priority,
            namespace=message_namespace(run.namespace),
        )
        if not died and self.orchestrator.pause_book.holds(message):
            return 0  # never claimed because its queue is paused: it is not lost
        node = definition.nodes.get(execution.node)
        outcome = self.policy.settle(
            message,
            node,
            claimed=execution.status == ExecutionStatus.RUNNING,
            died=died,
            recoveries=recoveries,
            worker="scheduler",
        )
        if outcome is not Outcome.RUN:
            self.metrics.recoveries.labels(outcome.value).inc()
            return 1
        self.metrics.recoveries.labels("redispatched").inc()
        cause = "worker died" if died else NEVER_CLAIMED
        self.orchestrator.record_recovery(message, cause=cause, recoveries=recoveries)
        self.orchestrator.publisher.publish([message])
        log.warning(
            "recovered %s attempt %d (%s): no lease, no result; dispatched again",
            key,
            execution.attempt,
            "its worker died" if died else NEVER_CLAIMED,
        )
        return 1

    def _queues_of(self, stalled: list[ExecutionRecord]) -> dict[tuple[str, str], str | None]:
        """(run, node) -> the queue the execution's messages go to (None: the default
        queue; ``<queue>@<build>`` for a run routed to a build: docs/versions.md), for a
        pass's executions in one read."""
        with self.orchestrator.store.reading() as tx:
            pinned = tx.pinned_versions([execution.run_id for execution in stalled])
        registry = self.orchestrator.registry
        return {
            (e.run_id, e.node): self._queue_of(e, registry.get(*pinned[e.run_id]))
            for e in stalled
            if e.run_id in pinned
        }

    def _queue_of(self, execution: ExecutionRecord, definition: WorkflowDefinition) -> str | None:
        queue = definition.queue_of(execution.node)
        build = self.orchestrator.builds.target(execution.run_id, definition)
        return queue if build is None else build_queue(queue or self.settings.queue, build)

    def _waits_for_build(self, execution: ExecutionRecord) -> bool:
        """Its run is routed to a build no live worker runs (docs/versions.md): its
        message waits in that build's queue, neither lost nor to be sent again."""
        with self.orchestrator.store.reading() as tx:
            pinned = tx.pinned_versions([execution.run_id])
        if execution.run_id not in pinned:
            return False
        definition = self.orchestrator.registry.get(*pinned[execution.run_id])
        return self.orchestrator.builds.waiting_for(execution.run_id, definition) is not None

    def _maybe_queued(self, execution: ExecutionRecord, now: float) -> bool:
        """Nobody has started it (no claim in PostgreSQL, no heartbeat record), and it
        has not waited so long that a queue could no longer explain it."""
        waited = now - to_epoch(execution.dispatched_at)
        return bool(
            execution.status == ExecutionStatus.SCHEDULED
            and waited < QUEUED_PATIENCE * self.settings.recovery_after
        )

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
