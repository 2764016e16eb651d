"""Workers whose clocks are five minutes off, on real services: one fast, one slow, and
every message delivered twice so that each tries to claim what the other holds. No
liveness decision may depend on a worker's wall clock: the fast one must not steal a live
lease, the slow one must not lose its own, and no timer they arm may fire early or late.

The skew is injected through the worker's clock (``CAIRN_CLOCK_SKEW_S``, read by
:mod:`cairn.clock`, through which every wall-clock read in cairn goes): libfaketime
would also freeze the timed waits of these processes.
"""

from __future__ import annotations

import time

from cairn.orchestrator.statuses import RunStatus
from tests.integration.conftest import Cluster

RUNS = 6
SKEW_S = 300.0


def test_workers_five_minutes_fast_and_slow_neither_steal_nor_lose_a_lease(
    cluster: Cluster,
) -> None:
    twice = {"CAIRN_DUPLICATE_DELIVERIES": "1"}
    fast = cluster.worker(concurrency=2, CAIRN_CLOCK_SKEW_S=str(SKEW_S), **twice)
    slow = cluster.worker(concurrency=2, CAIRN_CLOCK_SKEW_S=str(-SKEW_S), **twice)
    for worker in (fast, slow):
        cluster.consuming(worker)
    cluster.scheduler(CAIRN_CLOCK_SKEW_S=str(-SKEW_S), **twice)
    # b outlives several lease periods (TTL 2 s), renewed by whichever worker holds it.
    slow_b = {"b": 3 * cluster.settings.lease_ttl}
    run_ids = [cluster.submit("skewed", {"slow": slow_b}) for _ in range(RUNS)]
    cluster.wait_for(
        lambda: all(cluster.client.get_run(r).status is RunStatus.WAITING for r in run_ids),
        30,
        "every run to wait for its signal",
    )
    time.sleep(2.0)  # a wait timer armed five minutes early would have fired by now
    for run_id in run_ids:
        assert cluster.client.signal(run_id, "go", actor="test")
    for run_id in run_ids:
        view = cluster.wait(run_id, timeout_s=60)
        assert view.status is RunStatus.SUCCEEDED, (run_id, view.reason)
    executions = cluster.executions()
    for run_id in run_ids:
        assert executions[(run_id, "a", 1)] == 1
        assert executions[(run_id, "b", 1)] == 1
        audits = [
            e["type"] for e in cluster.client.events(run_id) if e["type"].startswith("audit.")
        ]
        assert "audit.recovered" not in audits and "audit.stale_write_rejected" not in audits
    stats = cluster.client.runtime.leases.stats()
    assert stats.get("lost", 0) == 0, stats
    assert stats.get("contended", 0) > 0, stats  # the duplicates did try to claim
    workers = {line.split()[5] for line in cluster.ledger.read_text().splitlines()}
    assert len(workers) >= 2, "both workers ran nodes"
