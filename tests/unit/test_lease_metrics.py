"""Lease counters and the lease wait histogram, as Prometheus scrapes them (memory twin).
The embedded broker timing its workers' claims: tests/embedded/test_lease_metrics.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cairn.lease.memory import MemoryLeases
from cairn.lease.waits import INF, WAIT_BUCKETS_S, WaitHistogram, bucket_field, delivered
from cairn.observe.metrics.leases import lease_registry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scrape(leases: Any) -> dict[str, float]:
    """Every sample of one scrape, by name and labels: ``name{le="0.05"}`` or ``name``."""
    text = generate_latest(lease_registry(leases)).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def test_the_collector_reports_every_counter_and_the_waits() -> None:
    clock = Clock()
    leases = MemoryLeases(clock)
    with delivered(time.time() - 0.03):  # published 30 ms ago
        first = leases.acquire("cairn:lease:r:a:1:run", 1.0)
    assert first is not None
    assert leases.acquire("cairn:lease:r:a:1:run", 1.0) is None  # contended: no wait counted
    assert leases.renew(first)
    second = leases.acquire("cairn:lease:r:b:1:run", 1.0)  # no publish time: no wait
    assert second is not None
    clock.now += 2.0  # both expire
    assert not leases.renew(first)  # lost
    with delivered(time.time() - 400):  # a backlog beyond every bound
        assert leases.acquire("cairn:lease:r:a:1:run", 1.0) is not None
    leases.count("stale_rejected")

    samples = scrape(leases)

    assert samples["cairn_lease_metrics_up"] == 1
    assert samples["cairn_lease_acquisitions_total"] == 3
    assert samples["cairn_lease_contended_total"] == 1
    assert samples["cairn_lease_renewals_total"] == 1
    assert samples["cairn_lease_losses_total"] == 1
    assert samples["cairn_stale_writes_rejected_total"] == 1
    assert samples['cairn_lease_wait_seconds_bucket{le="0.025"}'] == 0
    assert samples['cairn_lease_wait_seconds_bucket{le="0.05"}'] == 1
    assert samples['cairn_lease_wait_seconds_bucket{le="300.0"}'] == 1
    assert samples['cairn_lease_wait_seconds_bucket{le="+Inf"}'] == 2
    assert samples["cairn_lease_wait_seconds_count"] == 2
    assert samples["cairn_lease_wait_seconds_sum"] == pytest.approx(400.03, abs=0.5)
    assert leases.stats() == {
        "acquired": 3,
        "contended": 1,
        "renewed": 1,
        "lost": 1,
        "stale_rejected": 1,
    }


def test_counters_start_at_zero() -> None:
    samples = scrape(MemoryLeases())
    assert samples["cairn_lease_acquisitions_total"] == 0
    assert samples["cairn_stale_writes_rejected_total"] == 0
    assert samples["cairn_lease_wait_seconds_count"] == 0


def test_unreadable_counters_are_absent_not_zero() -> None:
    class Broken(MemoryLeases):
        def stats(self) -> dict[str, int]:
            raise ConnectionError("redis is gone")

    samples = scrape(Broken())
    assert samples == {"cairn_lease_metrics_up": 0}


def test_a_wait_falls_in_the_first_bucket_that_holds_it() -> None:
    assert bucket_field(0.0) == "0.005"
    assert bucket_field(0.005) == "0.005"
    assert bucket_field(0.0051) == "0.01"
    assert bucket_field(WAIT_BUCKETS_S[-1] + 1) == INF


def test_a_publish_in_the_future_counts_as_no_wait() -> None:
    leases = MemoryLeases()
    with delivered(time.time() + 5):  # the publisher's clock runs ahead
        assert leases.acquire("k", 1.0) is not None
    waits = leases.waits()
    assert waits.count == 1
    assert waits.counts[0] == 1
    assert waits.sum_s == 0


def test_the_histogram_reads_back_from_its_stored_fields() -> None:
    waits = WaitHistogram.from_fields({"0.005": 3, "0.25": 1, INF: 1, "sum": 301.0, "9.9": 7})
    assert waits.count == 5  # a bucket of another layout ("9.9") is dropped
    cumulative = dict(waits.cumulative())
    assert cumulative["0.1"] == 3
    assert cumulative["0.25"] == 4
    assert cumulative[INF] == 5
    assert waits.quantile(0.5) == 0.005
    assert waits.quantile(0.8) == 0.25
    assert waits.quantile(0.95) == float("inf")
    assert waits.summary() == "5 measured, mean 60.2 s, p50 <= 5 ms, p95 > 300 s"
    assert WaitHistogram.from_fields({}).summary() == "none measured"
