"""The fleet gauges a scheduler serves, read from the store (SQLite here; PostgreSQL in
tests/integration/test_lease_metrics.py), and a scheduler's own counters."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cairn.model.statuses import RunStatus
from cairn.observe.metrics.fleet import FleetCollector
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.runtime import Runtime
from tests.unit.test_embedded import settings, wait


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def test_backlogs_and_statuses_come_from_the_store(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    registry = CollectorRegistry()
    registry.register(FleetCollector(runtime.store))
    try:
        runtime.start_workers()
        done = runtime.orchestrator.submit("chain10", {"ledger": str(tmp_path / "a")})
        assert wait(runtime, done) is RunStatus.SUCCEEDED
        waiting = runtime.orchestrator.submit("approval", {"ledger": str(tmp_path / "b")})
        deadline = time.monotonic() + 10
        while runtime.orchestrator.get_run(waiting).status is not RunStatus.WAITING:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        samples = _samples(registry)
    finally:
        runtime.close()
    assert samples["cairn_fleet_metrics_up"] == 1
    assert samples["cairn_runs{status=succeeded}"] == 1
    assert samples["cairn_runs{status=waiting}"] == 1
    assert samples["cairn_runs{status=failed}"] == 0
    # The approval's wait timer is armed, not due; nothing left unpublished.
    assert samples["cairn_timers_due"] == 0
    assert samples["cairn_timer_overdue_seconds"] == 0
    assert samples["cairn_webhooks_pending"] == 0


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
