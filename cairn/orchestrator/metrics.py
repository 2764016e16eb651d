"""Prometheus metrics of the orchestrator's side: the fleet's backlogs as PostgreSQL
sees them, and what a scheduler process does (timers fired and how late, recoveries,
retries, relayed messages, webhook deliveries).

Two kinds of numbers, aggregated differently:

- **Fleet gauges** (:class:`FleetCollector`) are read from PostgreSQL at each scrape —
  runs by status, effects by status, held executions, and each backlog with its age:
  outbox messages not yet published (the relay's lag), due timers not yet fired (how
  late the oldest is), inbox entries, undelivered webhooks. Every scheduler serves the
  same numbers: aggregate with ``max``, not ``sum``. A scrape costs a handful of
  indexed aggregates; if PostgreSQL cannot be read, ``cairn_fleet_metrics_up`` is 0 and
  the gauges are absent rather than zero.
- **Scheduler counters** (:class:`SchedulerMetrics`) are this process's: ``sum`` them
  over the scheduler replicas.

The lease counters and the step histograms (queue wait, execution, commit) are fleet-wide
in Redis: :mod:`cairn.lease.metrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cairn.effects.ledger import EffectStatus
from cairn.orchestrator.state import TimerKind
from cairn.orchestrator.statuses import RunStatus
from cairn.store.repository import FleetGauges, Store

log = logging.getLogger(__name__)

UP = "cairn_fleet_metrics_up"
LATENESS_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
TIMER_KINDS = frozenset(kind.value for kind in TimerKind)
RETRY_TIMERS = frozenset({TimerKind.RETRY.value, TimerKind.COMPENSATION_RETRY.value})


class FleetCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def describe(self) -> Iterator[Metric]:
        # Without describe(), registering would call collect(): a query at startup.
        yield GaugeMetricFamily(UP, "1 if PostgreSQL could be read for the fleet gauges.")

    def collect(self) -> Iterator[Metric]:
        try:
            with self.store.reading() as tx:
                now = tx.now()
                gauges = tx.fleet_gauges(now)
        except Exception:
            log.warning("could not read the fleet gauges", exc_info=True)
            yield GaugeMetricFamily(UP, "1 if PostgreSQL could be read for the fleet gauges.", 0)
            return
        yield GaugeMetricFamily(UP, "1 if PostgreSQL could be read for the fleet gauges.", 1)
        yield from fleet_metrics(gauges, now)


def fleet_metrics(gauges: FleetGauges, now: float) -> Iterator[Metric]:
    runs = GaugeMetricFamily("cairn_runs", "Runs by status.", labels=["status"])
    for status in RunStatus:
        runs.add_metric([status.value], gauges.runs.get(status.value, 0))
    yield runs
    effects = GaugeMetricFamily(
        "cairn_effects", "Effects in the ledger by status.", labels=["status"]
    )
    for effect_status in sorted({*(s.value for s in EffectStatus), *gauges.effects}):
        effects.add_metric([effect_status], gauges.effects.get(effect_status, 0))
    yield effects
    yield GaugeMetricFamily(
        "cairn_held_executions",
        "Node executions held for an operator's decision.",
        gauges.held_executions,
    )
    backlogs = (
        ("cairn_outbox_unsent", "cairn_outbox_lag_seconds", gauges.unsent,
         "Node messages committed but not yet published",
         "Age of the oldest unpublished node message (the relay's lag)"),
        ("cairn_timers_due", "cairn_timer_overdue_seconds", gauges.due_timers,
         "Timers due and not yet fired",
         "How late the most overdue timer is"),
        ("cairn_inbox_pending", "cairn_inbox_lag_seconds", gauges.inbox,
         "Events for runs from other runs, not yet applied",
         "Age of the oldest inbox entry"),
        ("cairn_webhooks_pending", "cairn_webhook_lag_seconds", gauges.notifications,
         "Webhook notifications neither delivered nor given up",
         "Age of the oldest undelivered webhook notification"),
    )  # fmt: skip
    for count_name, lag_name, (count, oldest), count_help, lag_help in backlogs:
        yield GaugeMetricFamily(count_name, f"{count_help}.", count)
        lag = 0.0 if oldest is None else max(0.0, now - oldest)
        yield GaugeMetricFamily(lag_name, f"{lag_help}, seconds (0: none).", lag)


class SchedulerMetrics:
    """This scheduler process's counters; each instance has its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.timers_fired = Counter(
            "cairn_timers_fired",
            "Durable timers fired by this scheduler, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.timer_lateness = Histogram(
            "cairn_timer_lateness_seconds",
            "How long after its due time a timer fired.",
            buckets=LATENESS_BUCKETS_S,
            registry=self.registry,
        )
        self.retries = Counter(
            "cairn_retries",
            "Node (and compensation) retries started by this scheduler's retry timers.",
            registry=self.registry,
        )
        self.stalled = Counter(
            "cairn_nodes_stalled",
            "Running executions whose heartbeats arrive but whose progress has not moved for "
            "their node's stall_after, flagged by this scheduler (each once).",
            ["workflow"],
            registry=self.registry,
        )
        self.recoveries = Counter(
            "cairn_recoveries",
            "Executions with no live lease found by this scheduler: dispatched again, held "
            "for an operator, or failed after too many recoveries.",
            ["outcome"],
            registry=self.registry,
        )
        self.relayed = Counter(
            "cairn_outbox_relayed",
            "Node messages a crash left unpublished, published by this scheduler's relay.",
            registry=self.registry,
        )
        self.webhooks = Counter(
            "cairn_webhook_deliveries",
            "Webhook delivery attempts by this process, by outcome: delivered, retry "
            "(to be tried again), given_up.",
            ["outcome"],
            registry=self.registry,
        )

    def timer_fired(self, timer_id: str, lateness_s: float) -> None:
        kind = timer_id.partition(":")[0]
        kind = kind if kind in TIMER_KINDS else "other"
        self.timers_fired.labels(kind).inc()
        self.timer_lateness.observe(max(0.0, lateness_s))
        if kind in RETRY_TIMERS:
            self.retries.inc()
