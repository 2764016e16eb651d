"""Schedules' ticks and debounced runs, started when due.

Each due schedule is looked at in a transaction of its own that locks it, skipping one
another scheduler holds (:meth:`cairn.engine.schedules.Schedules.tick`): the ticks due
start as runs keyed by the tick, so several schedulers — or one killed mid-pass and
another taking over — start each tick once. A debounced run whose window is due is
started the same way, its window taken in the transaction that starts it. An idle
scheduler wakes for the next tick due sooner than its interval.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from cairn.config import Settings
from cairn.engine.orchestrator import Orchestrator
from cairn.errors import WorkflowDefinitionError
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.reconnect import is_outage
from cairn.repeats import Repeats

log = logging.getLogger(__name__)

BATCH = 100
# A schedule whose tick failed is tried again after this, doubling up to the most.
RETRY_FIRST_S = 1.0
RETRY_MOST_S = 60.0


@dataclass
class ScheduleTicks:
    orchestrator: Orchestrator
    settings: Settings
    metrics: SchedulerMetrics
    _next_at: float | None = field(default=None, init=False)  # time.monotonic()
    # A failing schedule → (its failures in a row, when to try it again: monotonic).
    _failing: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict, init=False)
    _repeats: Repeats = field(default_factory=lambda: Repeats(log), init=False)

    def start_due(self) -> tuple[int, int]:
        """Start the due ticks of every due schedule, and the debounced runs due; returns
        how many runs each started. One read finds both (and the database's clock)."""
        interval = self.settings.scheduler_interval
        with self.orchestrator.store.reading() as tx:
            now = tx.now()
            schedules = tx.due_schedules(now + interval, BATCH)
            windows = tx.due_debounces(now, BATCH)
        read_at = time.monotonic()
        self._next_at = None
        ticked = 0
        for namespace, name, next_at in schedules:
            if next_at > now:  # due within the interval: wake for it
                wake = read_at + next_at - now
                self._next_at = wake if self._next_at is None else min(self._next_at, wake)
                continue
            failing = self._failing.get((namespace, name))
            if failing is not None and failing[1] > read_at:
                continue
            try:
                done = self.orchestrator.schedules.tick(namespace, name)
            except Exception as error:  # one schedule's trouble must not hold up the others
                if is_outage(error):
                    raise
                self._failed(namespace, name, error)
                continue
            if failing is not None:
                del self._failing[(namespace, name)]
                self._repeats.recovered(
                    (namespace, name), f"schedule {namespace}/{name} ticks again"
                )
            if done is not None:
                ticked += len(done.started)
                self.metrics.schedule_ticks(len(done.started), done.skipped)
        debounced = self.orchestrator.start_debounced(windows, now) if windows else 0
        if debounced:
            self.metrics.debounced.inc(debounced)
        return ticked, debounced

    def _failed(self, namespace: str, name: str, error: Exception) -> None:
        """A tick that failed: one line (a definition's fault needs no traceback), kept
        on the schedule where people look, and the schedule tried again later."""
        key = (namespace, name)
        count = self._failing.get(key, (0, 0.0))[0] + 1
        delay = min(RETRY_MOST_S, RETRY_FIRST_S * 2 ** (count - 1))
        self._failing[key] = (count, time.monotonic() + delay)
        fault = isinstance(error, WorkflowDefinitionError)
        message = f"schedule {namespace}/{name} cannot tick"
        if self._repeats.failed(key, message, error, traceback=not fault):
            try:
                self.orchestrator.schedules.record_error(namespace, name, str(error))
            except Exception as also:  # the log line said it; the record is a courtesy
                log.warning("could not record schedule %s/%s's error: %s", namespace, name, also)

    def idle_wait(self, wait: float) -> float:
        """``wait``, or less if a tick comes due sooner."""
        if self._next_at is not None:
            wait = min(wait, max(0.0, self._next_at - time.monotonic()))
        return wait
