"""The fleet gauges when the store cannot be read, and a scheduler's own counters. The
gauges read from the store while runs go on: tests/embedded/test_fleet_metrics.py
(PostgreSQL: tests/integration/test_lease_metrics.py)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cairn.observe.metrics.fleet import FleetCollector
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.runtime import Runtime
from tests.support.embedded import settings


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def test_an_unreadable_store_reports_down(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    runtime.store.dispose()
    registry = CollectorRegistry()
    collector = FleetCollector(runtime.store)
    collector.store = None  # type: ignore[assignment]  # any failure to read
    registry.register(collector)
    assert _samples(registry) == {"cairn_fleet_metrics_up": 0.0}


def test_scheduler_counters_by_timer_kind() -> None:
    metrics = SchedulerMetrics()
    metrics.timer_fired("retry:call:1:1", 0.12)
    metrics.timer_fired("wait:review:1:0", -0.5)  # early by the clocks: counted as 0
    metrics.timer_fired("mystery", 1.0)
    samples = _samples(metrics.registry)
    assert samples["cairn_timers_fired_total{kind=retry}"] == 1
    assert samples["cairn_timers_fired_total{kind=wait}"] == 1
    assert samples["cairn_timers_fired_total{kind=other}"] == 1
    assert samples["cairn_retries_total"] == 1
    assert samples["cairn_timer_lateness_seconds_count"] == 3
    assert samples["cairn_timer_lateness_seconds_sum"] == 1.12
