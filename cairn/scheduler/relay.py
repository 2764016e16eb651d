"""The scheduler's message duties: the outbox relay and the inbox.

- **relay**: outbox rows a crash left unpublished are claimed with ``FOR UPDATE SKIP
  LOCKED``, published, and marked sent in the same transaction — several schedulers at
  once are safe, and a message published twice is a duplicate the workers turn away. A
  row whose execution's lease is held is in hand (a worker continued with that step
  instead of publishing it, :mod:`cairn.workers.step.continuation`): it waits another
  interval, and is published once no lease holds it — its worker died. A row of a queue
  with a backlog in the broker may be a fork's branch that another branch's message
  carries (:mod:`cairn.engine.grouping`), waiting in that queue: it is left to that
  message while the queue has one, for up to ``CAIRN_RECOVERY_AFTER``;
- **inbox**: events one run left for another (a child's end, a parent's cancel) that
  were not applied right after their commit are applied, each once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from cairn.config import Settings
from cairn.engine.orchestrator import Orchestrator
from cairn.faults import fault_point
from cairn.lease.port import Leases
from cairn.model.events import Phase
from cairn.model.keys import lease_key
from cairn.model.messages import NodeMessage
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.store.messages import HeldQueues

log = logging.getLogger(__name__)

BATCH = 500


@dataclass
class Relay:
    orchestrator: Orchestrator
    settings: Settings
    metrics: SchedulerMetrics
    relay_after: float | None = None  # seconds; default from settings
    # Whose leases say a row is in a worker's hand (None: no row ever is).
    leases: Leases | None = None

    def relay(self) -> int:
        relay_after = (
            self.relay_after if self.relay_after is not None else self.settings.outbox_relay_after
        )
        store = self.orchestrator.store
        # Messages of paused queues stay in the outbox until they resume.
        held = self.orchestrator.pause_book.held_queues()
        with store.reading() as tx:  # an idle pass costs no commit
            if not tx.has_unsent(tx.now() - relay_after, held):
                return 0
        with store.transaction() as tx:
            now = tx.now()
            held = self._while_queued(held, now)
            rows = tx.claim_unsent(now - relay_after, BATCH, held)
            in_hand = self._in_hand(rows)
            if in_hand:
                tx.defer_unsent(sorted(in_hand))
                rows = [row for row in rows if row.id not in in_hand]
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

    def _while_queued(self, held: HeldQueues, now: float) -> HeldQueues:
        """``held``, and the queues with a backlog in the broker: a row of theirs may be
        a branch its lead's message carries (cairn.engine.grouping), waiting there with
        it; it is left to that message until the queue is empty, or for as long as
        recovery would wait for a queued execution. Queues the broker cannot count, and
        queues not declared (CAIRN_QUEUES), are relayed from as ever."""
        settings = self.settings
        if settings.broker_url is None or settings.branches_per_message < 2:
            return held  # nothing is grouped: no row is carried
        publisher = self.orchestrator.publisher
        waiting = frozenset(
            name for name in {settings.queue, *settings.queues} if publisher.backlog(name)
        )
        if not waiting:
            return held
        return replace(held, waiting=waiting, waiting_since=now - settings.recovery_after)

    def _in_hand(self, rows: list[Any]) -> set[int]:
        """The rows whose execution's lease some worker holds."""
        if self.leases is None:
            return set()
        leases = self.leases
        return {
            row.id
            for row in rows
            if leases.held(
                lease_key(
                    row.payload["run_id"],
                    row.payload["node"],
                    int(row.payload["iteration"]),
                    str(row.payload.get("phase", Phase.RUN.value)),
                )
            )
        }

    def deliver(self) -> int:
        with self.orchestrator.store.reading() as tx:
            posted = tx.posted(BATCH)
        return sum(self.orchestrator.deliver(entry.id, entry.run_id) for entry in posted)
