"""The embedded broker times every claim its worker threads make, as Prometheus scrapes
the lease counters and the lease wait histogram (memory twin). The counters and the
histogram themselves: tests/unit/test_lease_metrics.py."""

from __future__ import annotations

import time
from pathlib import Path

from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.unit.test_lease_metrics import scrape

WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")


def test_the_embedded_broker_times_every_claim(tmp_path: Path) -> None:
    runtime = Runtime.build(
        Settings(home=tmp_path, workflows=[WORKFLOWS], lease_ttl=3, heartbeat_interval=1)
    )
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit("chain10", {})
        deadline = time.monotonic() + 20
        while not runtime.orchestrator.get_run(run_id).status.terminal:
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.02)
        assert runtime.orchestrator.get_run(run_id).status is RunStatus.SUCCEEDED
        samples = scrape(runtime.leases)
    finally:
        runtime.close()
    assert samples["cairn_lease_acquisitions_total"] == 10
    assert samples["cairn_lease_wait_seconds_count"] == 10
    assert 0 < samples["cairn_lease_wait_seconds_sum"] < 10
