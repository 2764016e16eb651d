"""Circuit breaking on the embedded runtime (SQLite, worker threads, memory circuits),
in real time: an outage opens a dependency's circuit, attempts wait instead of retrying
into it, one probe a period tests it, and its success lets every waiter through. (The
definitions' side: tests/unit/test_circuits.py; on real services:
tests/acceptance/test_circuits.py.)"""

from __future__ import annotations

import time
from pathlib import Path

from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support import payments

WORKFLOW = f"""
name: guarded
version: 1
start: charge
nodes:
  charge: {{handler: "{payments.HANDLER}", next: done,
            dependency: {{name: payments, failures: 3, window: 1m, open_for: 500ms}},
            retry: {{attempts: 30, backoff: 50ms, max_delay: 100ms, jitter: none}}}}
  done: {{end: succeeded}}
"""


def test_an_outage_parks_attempts_until_a_probe_finds_the_dependency_back(
    tmp_path: Path,
) -> None:
    (tmp_path / "guarded.yaml").write_text(WORKFLOW)
    settings = Settings(
        home=tmp_path / "home",
        workflows=[str(tmp_path / "guarded.yaml")],
        lease_ttl=3.0,
        heartbeat_interval=1.0,
        scheduler_interval=0.05,
    )
    payments.calls.clear()
    payments.down.set()
    runtime = Runtime.build(settings, concurrency=4)
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        runs = [runtime.orchestrator.submit("guarded", {}) for _ in range(6)]
        circuits = runtime.circuits
        assert circuits is not None
        deadline = time.monotonic() + 20
        while circuits.limits(["payments"])["payments"] is None:
            assert time.monotonic() < deadline, "the circuit never opened"
            time.sleep(0.02)
        time.sleep(0.5)  # what was in flight when it opened has ended
        before = len(payments.calls)
        time.sleep(2.0)  # four probe periods: a probe each, at most
        probes = len(payments.calls) - before
        assert 1 <= probes <= 5, probes  # not the runs' retries, every 50-100 ms
        assert all(not runtime.orchestrator.get_run(r).status.terminal for r in runs)
        payments.down.clear()
        for run_id in runs:
            while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
                assert time.monotonic() < deadline + 10, f"{run_id} never ended"
                time.sleep(0.02)
            assert view.status is RunStatus.SUCCEEDED, view.reason
        assert circuits.reports() == []  # closed, nothing counted
        with runtime.store.reading() as tx:
            assert tx.waiting_pools() == []
    finally:
        payments.down.clear()
        runtime.close()
