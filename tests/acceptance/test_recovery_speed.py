"""Dead workers, on real services and with the settings a user gets: the node of a worker
killed with ``kill -9`` runs again within one lease TTL and one scheduler sweep; and a
node that kills its worker every time runs at most ``CAIRN_MAX_RECOVERIES`` times,
whichever path — the scheduler's sweep or a redelivered message — finds each death.
"""

from __future__ import annotations

import time

import pytest

from cairn.config import Settings
from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster

# It measures recovery time, which sharing the CPU would skew: run alone, after the rest
# (make test).
pytestmark = pytest.mark.serial

DEFAULTS = Settings()
# The lease and recovery settings as a user gets them (the test cluster's are faster).
DEFAULT_TIMING = {
    "CAIRN_LEASE_TTL": str(DEFAULTS.lease_ttl),
    "CAIRN_HEARTBEAT_INTERVAL": str(DEFAULTS.heartbeat_interval),
    "CAIRN_RECOVERY_AFTER": str(DEFAULTS.recovery_after),
    "CAIRN_OUTBOX_RELAY_AFTER": str(DEFAULTS.outbox_relay_after),
    "CAIRN_SCHEDULER_INTERVAL": str(DEFAULTS.scheduler_interval),
}


def _started(cluster: Cluster, run_id: str, node: str) -> int:
    """How often ``node`` has started, by the handlers' own ledger."""
    return cluster.executions()[(run_id, node, 1)]


def test_a_dead_workers_node_runs_again_within_a_lease_ttl_and_a_sweep_by_default(
    cluster: Cluster,
) -> None:
    doomed = cluster.worker(concurrency=1, **DEFAULT_TIMING)
    cluster.consuming(doomed)
    cluster.scheduler(**DEFAULT_TIMING)
    run_id = cluster.submit("chain10", {"slow": {"n2": 120}})
    cluster.wait_for(lambda: _started(cluster, run_id, "n2") == 1, 30, "n2 to start")
    survivor = cluster.worker(concurrency=1, **DEFAULT_TIMING)
    cluster.consuming(survivor)
    time.sleep(1.0)  # a renewal or two of n2's lease went through
    cluster.kill(doomed)
    killed_at = time.monotonic()
    cluster.wait_for(
        lambda: _started(cluster, run_id, "n2") == 2,
        DEFAULTS.lease_ttl + 15,
        "n2 to run again",
    )
    recovered_s = time.monotonic() - killed_at
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    # The lease runs out at most one TTL after its last renewal (one interval before the
    # kill at most), and the next sweep finds it.
    bound = DEFAULTS.lease_ttl + DEFAULTS.scheduler_interval + 2.0
    assert recovered_s <= bound, (recovered_s, bound)
    recovered = [
        event["data"]
        for event in cluster.client.events(run_id)
        if event["type"] == "audit.recovered"
    ]
    assert [(r["node"], r["cause"], r["recoveries"]) for r in recovered] == [
        ("n2", "worker died", 1)
    ]
    print(
        f"\nkill -9 -> node running again: {recovered_s:.1f} s (defaults: lease TTL "
        f"{DEFAULTS.lease_ttl:g} s, heartbeat {DEFAULTS.heartbeat_interval:g} s, "
        f"scheduler interval {DEFAULTS.scheduler_interval:g} s)"
    )


def test_a_node_that_kills_every_worker_runs_at_most_max_recoveries_times(
    cluster: Cluster,
) -> None:
    """Every message is delivered twice (a duplicate reaches a worker after each death,
    racing the sweep to take the node over) and two worker processes share the queue:
    each death is counted once, on whichever path finds it, and the cap holds."""
    settings = {"CAIRN_MAX_RECOVERIES": "3", "CAIRN_DUPLICATE_DELIVERIES": "1"}
    worker = cluster.worker(concurrency=2, **settings)
    cluster.consuming(worker)
    cluster.scheduler(**settings)
    run_id = cluster.submit("poison")
    view = cluster.wait(run_id, timeout_s=90)
    assert view.status is RunStatus.FAILED
    assert "max_attempts" in (view.reason or "")
    time.sleep(3 * cluster.settings.lease_ttl)  # nothing runs it again later
    assert cluster.executions()[(run_id, "die", 1)] == 3
