"""The scheduler process: the outbox relay and inbox, durable timers, schedules' ticks and
debounced starts, recovery and stall watch, compaction and retention — one pass after
another.

It never runs handlers; everything it does goes through the orchestrator's normal write
path, so running it twice, or several schedulers at once, is harmless. Each duty is a
module of its own: :mod:`~cairn.scheduler.relay`, :mod:`~cairn.scheduler.timers`,
:mod:`~cairn.scheduler.schedules`, :mod:`~cairn.scheduler.recovery`,
:mod:`~cairn.scheduler.housekeeping`. Webhook notifications are delivered beside it, on
a thread of their own, by :mod:`~cairn.scheduler.notifier`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field

from cairn.config import Settings
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.recovery import RecoveryPolicy
from cairn.engine.slots import SlotGate
from cairn.lease.port import Leases
from cairn.observe import activity
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.reconnect import is_outage
from cairn.repeats import Repeats
from cairn.scheduler.housekeeping import Housekeeping
from cairn.scheduler.recovery import Recovery
from cairn.scheduler.relay import Relay
from cairn.scheduler.schedules import ScheduleTicks
from cairn.scheduler.timers import Timers

log = logging.getLogger(__name__)

OUTAGE_MAX_WAIT_S = 5.0
COMPACT_EVERY_PASSES = 120
# Reading a queue's length also drops its fairness counts when it is empty (they cannot
# drift past a queue's next empty moment): one Redis script call per queue.
QUEUE_CHECK_EVERY_S = 10.0
STALL_CHECK_EVERY_S = 2.0  # stall_after is minutes in practice; reading every claim costs


@dataclass
class PassReport:
    relayed: int = 0
    delivered: int = 0
    fired: int = 0
    ticked: int = 0  # runs started by schedules' ticks
    debounced: int = 0  # debounced runs started
    recovered: int = 0
    compacted: int = 0
    expired: int = 0
    woken: int = 0  # executions parked for a slot, published again
    unheld: int = 0  # runs held by a pause since lifted, started

    def __bool__(self) -> bool:
        return bool(
            self.woken
            or self.relayed
            or self.delivered
            or self.fired
            or self.ticked
            or self.debounced
            or self.recovered
            or self.compacted
            or self.expired
            or self.unheld
        )


@dataclass
class Scheduler:
    orchestrator: Orchestrator
    leases: Leases
    settings: Settings
    relay_after: float | None = None  # seconds; default from settings
    # Executions parked for a concurrency slot: woken each pass as their pools free.
    gate: SlotGate | None = None
    metrics: SchedulerMetrics = field(default_factory=SchedulerMetrics)
    _passes: int = field(default=0, init=False)
    _next_stall_check: float = field(default=0.0, init=False)  # time.monotonic()
    _next_queue_check: float = field(default=0.0, init=False)
    _repeats: Repeats = field(default_factory=lambda: Repeats(log), init=False)

    def __post_init__(self) -> None:
        self.messages = Relay(
            self.orchestrator, self.settings, self.metrics, self.relay_after, self.leases
        )
        self.timers = Timers(self.orchestrator, self.leases, self.settings, self.metrics)
        self.schedules = ScheduleTicks(self.orchestrator, self.settings, self.metrics)
        self.recovery = Recovery(self.orchestrator, self.leases, self.settings, self.metrics)
        self.housekeeping = Housekeeping(self.orchestrator, self.settings)

    @property
    def policy(self) -> RecoveryPolicy:
        return self.recovery.policy

    def run_once(self) -> PassReport:
        report = PassReport(
            relayed=self.relay(),
            delivered=self.deliver(),
            fired=self.fire_timers(),
            woken=self.wake_parked(),
        )
        report.ticked, report.debounced = self.start_scheduled()
        report.recovered = self.recover()
        if time.monotonic() >= self._next_stall_check:
            self._next_stall_check = time.monotonic() + STALL_CHECK_EVERY_S
            self.flag_stalls()
            # Runs a lifted pause held, left by a resume that did not finish starting them.
            report.unheld = self.orchestrator.pauses.start_orphans()
        if time.monotonic() >= self._next_queue_check:
            self._next_queue_check = time.monotonic() + QUEUE_CHECK_EVERY_S
            self.read_queues()
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
                # Back off while PostgreSQL or Redis is away (full jitter: several
                # schedulers do not come back in step); every pass is safe to repeat.
                delay = random.uniform(0, min(OUTAGE_MAX_WAIT_S, 0.1 * 2 ** min(failures, 10)))
                if is_outage(error):
                    log.warning(
                        "scheduler pass %d failed (%s); next in %.2f s", failures, error, delay
                    )
                else:  # a fault that repeats until someone mends it: said once a minute
                    self._repeats.failed(type(error).__name__, "scheduler pass failed", error)
                stop.wait(max(delay, self.settings.scheduler_interval))
                continue
            if failures:
                log.info("scheduler back after %d failed pass(es)", failures)
                failures = 0
            if not report:
                stop.wait(self.idle_wait())

    # -- each duty, for tests and tools that drive one at a time ---------------------

    def relay(self) -> int:
        return self.messages.relay()

    def deliver(self) -> int:
        return self.messages.deliver()

    def fire_timers(self) -> int:
        return self.timers.fire()

    def start_scheduled(self) -> tuple[int, int]:
        """(runs started by schedules' ticks, debounced runs started)."""
        return self.schedules.start_due()

    def idle_wait(self) -> float:
        return self.schedules.idle_wait(self.timers.idle_wait())

    def recover(self) -> int:
        return self.recovery.recover()

    def wake_parked(self) -> int:
        return self.gate.wake_waiting() if self.gate is not None else 0

    def flag_stalls(self) -> int:
        return self.recovery.flag_stalls()

    def read_queues(self) -> dict[str, int | None]:
        """Each declared queue's backlog. With a Redis broker the same script that counts
        a queue drops its namespaces' fairness counts if it is empty
        (:mod:`cairn.workers.fairness`): they are mended whenever a queue runs dry."""
        publisher = self.orchestrator.publisher
        with self.orchestrator.store.reading() as tx:
            builds = [b.build for b in tx.builds(activity.BUILD_QUEUES_WITHIN_S)]
        queues = dict.fromkeys([self.settings.queue, *self.settings.queues])
        return activity.backlogs(queues, publisher.backlog, builds)

    def compact(self) -> int:
        return self.housekeeping.compact()

    def expire(self) -> int:
        return self.housekeeping.expire()
