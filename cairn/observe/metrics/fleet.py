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
in Redis: :mod:`cairn.observe.metrics.leases`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cairn.engine.builds import BuildBook
from cairn.limits.circuits import Circuits
from cairn.limits.concurrency import Slots
from cairn.limits.rates import Rates
from cairn.model.effects import EffectStatus
from cairn.model.statuses import RunStatus
from cairn.observe.limits import circuit_views, is_circuit_pool, pool_reports
from cairn.store.records import FleetGauges
from cairn.store.sql import Store

log = logging.getLogger(__name__)

UP = "cairn_fleet_metrics_up"


class FleetCollector(Collector):
    def __init__(
        self,
        store: Store,
        slots: Slots | None = None,
        circuits: Circuits | None = None,
        rates: Rates | None = None,
        builds: BuildBook | None = None,
    ) -> None:
        self.store = store
        self.slots = slots
        self.circuits = circuits
        self.rates = rates
        self.builds = builds

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
        if self.slots is not None:
            yield from self._pools(self.slots)
        if self.rates is not None:
            yield from self._rates(self.rates)
        if self.builds is not None:
            yield from self._waiting_for_builds(self.builds)

    def _waiting_for_builds(self, builds: BuildBook) -> Iterator[Metric]:
        try:
            waiting = builds.waiting_runs()
        except Exception:
            log.warning("could not read the runs waiting for a build", exc_info=True)
            return
        gauge = GaugeMetricFamily(
            "cairn_runs_waiting_for_worker",
            "Unfinished runs routed to a build no live worker runs (docs/versions.md).",
            labels=["workflow", "build"],
        )
        for (workflow, build), count in sorted(waiting.items()):
            gauge.add_metric([workflow, build], count)
        yield gauge

    def _rates(self, rates: Rates) -> Iterator[Metric]:
        try:
            reports = rates.report()
        except Exception:
            log.warning("could not read the rate buckets", exc_info=True)
            return
        used = GaugeMetricFamily(
            "cairn_rate_used",
            "Requests or tokens a rate key's calls took within its period.",
            labels=["bucket", "unit"],
        )
        limit = GaugeMetricFamily(
            "cairn_rate_limit", "A rate key's limit per period.", labels=["bucket", "unit"]
        )
        waiting = GaugeMetricFamily(
            "cairn_rate_waiting", "Model calls waiting for their turn.", labels=["bucket"]
        )
        paused = GaugeMetricFamily(
            "cairn_rate_paused_seconds",
            "How much longer a provider's 429 pauses the key (0: not paused).",
            labels=["bucket"],
        )
        for report in reports:
            for unit, cap, count in (
                ("requests", report.requests_limit, report.requests_used),
                ("tokens", report.tokens_limit, report.tokens_used),
            ):
                if cap is not None:
                    used.add_metric([report.bucket, unit], count)
                    limit.add_metric([report.bucket, unit], cap)
            waiting.add_metric([report.bucket], report.waiting)
            paused.add_metric([report.bucket], report.paused_for_s)
        yield from (used, limit, waiting, paused)

    def _pools(self, slots: Slots) -> Iterator[Metric]:
        try:
            reports = pool_reports(self.store, slots)
            views = circuit_views(self.circuits, reports) if self.circuits is not None else []
        except Exception:
            log.warning("could not read the concurrency pools", exc_info=True)
            return
        circuits = GaugeMetricFamily(
            "cairn_circuit_open",
            "1 while a dependency's circuit is open or half-open (its attempts wait).",
            labels=["dependency", "state"],
        )
        waiting_on = GaugeMetricFamily(
            "cairn_circuit_waiting",
            "Executions parked until the dependency's circuit closes.",
            labels=["dependency"],
        )
        for view in views:
            state = view.circuit.state
            circuits.add_metric([view.circuit.dependency, state], int(state != "closed"))
            waiting_on.add_metric([view.circuit.dependency], view.waiting)
        yield circuits
        yield waiting_on
        reports = [report for report in reports if not is_circuit_pool(report)]
        running = GaugeMetricFamily(
            "cairn_slots_running", "Executions holding a slot of the pool.", labels=["pool"]
        )
        waiting = GaugeMetricFamily(
            "cairn_slots_waiting", "Executions parked for a slot of the pool.", labels=["pool"]
        )
        for report in reports:
            running.add_metric([report.pool], report.running)
            waiting.add_metric([report.pool], report.waiting)
        yield running
        yield waiting


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
