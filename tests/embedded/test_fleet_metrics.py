"""The fleet gauges a scheduler serves, read from the store (SQLite here; PostgreSQL in
tests/integration/test_lease_metrics.py) while the embedded runtime's workers run."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from cairn.model.statuses import RunStatus
from cairn.observe.metrics.fleet import FleetCollector
from cairn.runtime import Runtime
from tests.support.embedded import settings, wait
from tests.unit.test_fleet_metrics import _samples


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
