"""The lease counters and the lease wait histogram, for Prometheus.

The numbers are fleet-wide: the lease scripts keep them in Redis (see
:mod:`cairn.lease.redis`), so a scrape reads the truth for every worker at once,
prefork children included, rather than one process's share. Every process that serves
them (workers, schedulers: ``--metrics-port``) serves the same numbers; aggregate with
``max`` over instances, not ``sum``. With the embedded leases they are this process's.

A scrape costs two ``HGETALL`` on the leases' Redis. If Redis cannot be read, the scrape
still answers, with ``cairn_lease_metrics_up 0`` and no lease numbers: an absent series
is better than a counter that seems to have dropped to zero.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from cairn.lease.port import Leases
from cairn.lease.waits import WaitHistogram

log = logging.getLogger(__name__)

# metric name (without _total), counter in Leases.stats(), help
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("cairn_lease_acquisitions", "acquired", "Leases taken (node executions claimed)."),
    (
        "cairn_lease_contended",
        "contended",
        "Lease claims refused because another worker held the lease.",
    ),
    ("cairn_lease_renewals", "renewed", "Lease renewals by heartbeats."),
    (
        "cairn_lease_losses",
        "lost",
        "Renewals or beats that found the lease gone or taken over.",
    ),
    (
        "cairn_stale_writes_rejected",
        "stale_rejected",
        "Results not committed because their worker had lost its claim.",
    ),
    (
        "cairn_branches_carried",
        "branches_carried",
        "A fork's branches run by the worker whose message carried them.",
    ),
    (
        "cairn_branches_spilled",
        "branches_spilled",
        "Carried branches published on their own instead: not begun within "
        "CAIRN_BRANCH_SPILL_AFTER, or not to be run by that worker.",
    ),
)
WAIT_METRIC = "cairn_lease_wait_seconds"
UP_METRIC = "cairn_lease_metrics_up"
# The timed parts of a step, after its queue wait (WAIT_METRIC): metric name, help.
STEP_METRICS = {
    "execution": (
        "cairn_step_execution_seconds",
        "Seconds a node's handler ran (one execution, from its start to its return).",
    ),
    "commit": (
        "cairn_step_commit_seconds",
        "Seconds to record a node's result and advance its run (the step's transaction, "
        "retries through an outage included).",
    ),
}
# Anomalies the decider caught (cairn.observe.alerts), counted with the lease
# counters so that they are fleet-wide too: one counter per workflow, kind and action.
ANOMALY_METRIC = "cairn_anomalies"
ANOMALY_LABELS = ("workflow", "kind", "action")
_ANOMALY_HELP = (
    "Anomalies caught in runs (no_progress, ping_pong, oscillation), by workflow, kind and "
    "what was done (intervened, failed, handed_off)."
)
_ANOMALY_PREFIX = "anomalies"
_SEPARATOR = "|"  # never in a workflow name, a kind or an action


# Circuits of dependencies opened, opened again (a probe failed) and closed, fleet-wide.
CIRCUIT_METRIC = "cairn_circuit_changes"
CIRCUIT_LABELS = ("dependency", "change")
_CIRCUIT_HELP = "Circuits of dependencies opened, reopened (a probe failed) and closed."
_CIRCUIT_PREFIX = "circuits"


def circuit_counter(dependency: str, change: str) -> str:
    """The name of the fleet-wide counter (``Leases.count``) of a circuit's changes."""
    return _SEPARATOR.join((_CIRCUIT_PREFIX, dependency, change))


def anomaly_counter(workflow: str, kind: str, action: str) -> str:
    """The name of the fleet-wide counter (``Leases.count``) of these anomalies."""
    return _SEPARATOR.join((_ANOMALY_PREFIX, workflow, kind, action))


def anomaly_family(stats: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(ANOMALY_METRIC, _ANOMALY_HELP, labels=ANOMALY_LABELS)
    for name, value in sorted(stats.items()):
        parts = name.split(_SEPARATOR)
        if len(parts) == 4 and parts[0] == _ANOMALY_PREFIX:
            family.add_metric(parts[1:], value)
    return family


def circuit_family(stats: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(CIRCUIT_METRIC, _CIRCUIT_HELP, labels=CIRCUIT_LABELS)
    for name, value in sorted(stats.items()):
        parts = name.split(_SEPARATOR)
        if len(parts) == 3 and parts[0] == _CIRCUIT_PREFIX:
            family.add_metric(parts[1:], value)
    return family


class LeaseCollector(Collector):
    """Reads the counters from the leases at every scrape."""

    def __init__(self, leases: Leases) -> None:
        self.leases = leases

    def describe(self) -> Iterator[Metric]:
        # Without describe(), registering would call collect(), reading Redis at startup.
        yield GaugeMetricFamily(UP_METRIC, "1 if the lease counters could be read.")
        for name, _field, help_text in COUNTERS:
            yield CounterMetricFamily(name, help_text)
        yield HistogramMetricFamily(WAIT_METRIC, _WAIT_HELP)
        for name, help_text in STEP_METRICS.values():
            yield HistogramMetricFamily(name, help_text)
        yield CounterMetricFamily(ANOMALY_METRIC, _ANOMALY_HELP, labels=ANOMALY_LABELS)
        yield CounterMetricFamily(CIRCUIT_METRIC, _CIRCUIT_HELP, labels=CIRCUIT_LABELS)

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.leases.stats()
            waits = self.leases.waits()
            steps = self.leases.step_times()
        except Exception:
            log.warning("could not read the lease counters", exc_info=True)
            yield GaugeMetricFamily(UP_METRIC, "1 if the lease counters could be read.", 0)
            return
        yield GaugeMetricFamily(UP_METRIC, "1 if the lease counters could be read.", 1)
        for name, field, help_text in COUNTERS:
            yield CounterMetricFamily(name, help_text, value=stats.get(field, 0))
        yield wait_histogram(waits)
        for part, (name, help_text) in STEP_METRICS.items():
            histogram = steps[part]
            yield HistogramMetricFamily(
                name, help_text, buckets=histogram.cumulative(), sum_value=histogram.sum_s
            )
        yield anomaly_family(stats)
        yield circuit_family(stats)


_WAIT_HELP = (
    "Seconds from a node message's publish to its lease being taken (queue time plus the "
    "worker's read before claiming)."
)


def wait_histogram(waits: WaitHistogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(
        WAIT_METRIC, _WAIT_HELP, buckets=waits.cumulative(), sum_value=waits.sum_s
    )


def lease_registry(leases: Leases, *more: Collector) -> CollectorRegistry:
    registry = CollectorRegistry()
    for collector in (LeaseCollector(leases), *more):
        registry.register(collector)
    return registry


def serve_metrics(
    leases: Leases, port: int, addr: str = "0.0.0.0", more: Sequence[Collector] = ()
) -> WSGIServer:
    """Serve the lease metrics, and ``more`` (a scheduler's), on
    ``http://addr:port/metrics`` from a daemon thread (``shutdown()`` the server
    returned to stop)."""
    server, _thread = start_http_server(port, addr, registry=lease_registry(leases, *more))
    log.info("serving lease metrics on %s:%d/metrics", addr, port)
    return server
