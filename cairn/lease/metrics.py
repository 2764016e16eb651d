"""The lease counters and the lease wait histogram, for Prometheus.

The numbers are fleet-wide: the lease scripts keep them in Redis (see
:mod:`cairn.lease.leases`), so a scrape reads the truth for every worker at once,
prefork children included, rather than one process's share. Every process that serves
them (workers, schedulers: ``--metrics-port``) serves the same numbers; aggregate with
``max`` over instances, not ``sum``. With the embedded leases they are this process's.

A scrape costs two ``HGETALL`` on the leases' Redis. If Redis cannot be read, the scrape
still answers, with ``cairn_lease_metrics_up 0`` and no lease numbers: an absent series
is better than a counter that seems to have dropped to zero.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from cairn.lease.leases import Leases
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
)
WAIT_METRIC = "cairn_lease_wait_seconds"
UP_METRIC = "cairn_lease_metrics_up"


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

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.leases.stats()
            waits = self.leases.waits()
        except Exception:
            log.warning("could not read the lease counters", exc_info=True)
            yield GaugeMetricFamily(UP_METRIC, "1 if the lease counters could be read.", 0)
            return
        yield GaugeMetricFamily(UP_METRIC, "1 if the lease counters could be read.", 1)
        for name, field, help_text in COUNTERS:
            yield CounterMetricFamily(name, help_text, value=stats.get(field, 0))
        yield wait_histogram(waits)


_WAIT_HELP = (
    "Seconds from a node message's publish to its lease being taken (queue time plus the "
    "worker's read before claiming)."
)


def wait_histogram(waits: WaitHistogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(
        WAIT_METRIC, _WAIT_HELP, buckets=waits.cumulative(), sum_value=waits.sum_s
    )


def lease_registry(leases: Leases) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(LeaseCollector(leases))
    return registry


def serve_metrics(leases: Leases, port: int, addr: str = "0.0.0.0") -> WSGIServer:
    """Serve the lease metrics on ``http://addr:port/metrics`` from a daemon thread
    (``shutdown()`` the server returned to stop)."""
    server, _thread = start_http_server(port, addr, registry=lease_registry(leases))
    log.info("serving lease metrics on %s:%d/metrics", addr, port)
    return server
