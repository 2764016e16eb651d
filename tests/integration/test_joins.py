"""Parallel fan-out and the join, with real PostgreSQL, Redis and Celery workers: a
branch whose worker is killed, a branch that raises, one that hangs past the join
timeout, and a quorum that leaves a straggler behind (told to stop)."""

from __future__ import annotations

import time

from cairn.model.keys import lease_key
from cairn.model.state import BranchOutcome
from cairn.model.statuses import NodeStatus, RunStatus
from tests.support.cluster import Cluster


def test_join_all_waits_for_a_branch_whose_worker_was_killed(cluster: Cluster) -> None:
    worker = cluster.worker(concurrency=3)
    cluster.scheduler()
    run_id = cluster.submit("fan_all", {"slow": {"y": 30}})
    cluster.wait_for(lambda: cluster.executions()[(run_id, "y", 1)] == 1, 30, "y to start")

    def recorded(node: str) -> bool:  # committed, not merely started: the kill spares it
        state = cluster.client.get_run(run_id).state
        return state is not None and state.nodes[node].status is NodeStatus.SUCCEEDED

    cluster.wait_for(lambda: recorded("x") and recorded("z"), 30, "x and z to be recorded")
    cluster.kill(worker)
    cluster.worker(concurrency=3)
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert (counts[(run_id, "x", 1)], counts[(run_id, "y", 1)], counts[(run_id, "z", 1)]) == (
        1,
        2,
        1,
    )
    assert view.state is not None
    assert {view.state.vars[n] for n in "xyz"} == {1}  # every branch's output, once
    branch_results = [e for e in cluster.client.events(run_id) if e["type"] == "node_succeeded"]
    assert sorted(e["data"]["node"] for e in branch_results) == ["x", "y", "z"]


def test_join_critical_survives_a_failing_and_a_hanging_branch(cluster: Cluster) -> None:
    # The 3 s join timeout runs from the fan-out: a worker still starting would miss it.
    cluster.consuming(cluster.worker(concurrency=3))
    cluster.scheduler()
    started = time.monotonic()
    run_id = cluster.submit("fan_critical", {"hang_s": 60})
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert time.monotonic() - started < 20  # the join timeout (3 s), not the 60 s hang
    assert view.state is not None
    assert view.state.vars["b"] == "fallback" and view.state.vars["c"] == "fallback"
    assert view.state.vars["a"] == 1
    join = view.state.joins["fan"]
    assert join.outcomes == {
        "a": BranchOutcome.SUCCEEDED,
        "b": BranchOutcome.DEFAULTED,
        "c": BranchOutcome.DEFAULTED,
    }
    # The hanging branch was told to stop and did, at its next safe point (well before
    # its 60 s were up).
    cluster.wait_for(lambda: _stopped(cluster, run_id, "c"), 30, "c to stop")


def test_join_quorum_goes_on_at_k_and_the_straggler_stops(cluster: Cluster) -> None:
    cluster.consuming(cluster.worker(concurrency=3))
    cluster.scheduler()
    run_id = cluster.submit("fan_quorum", {"hang_s": 60, "slow": {"p": 1.0, "q": 1.0}})
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.state is not None
    assert view.state.nodes["r"].status is NodeStatus.CANCELLED
    assert "r" not in view.state.vars
    cluster.wait_for(lambda: _stopped(cluster, run_id, "r"), 30, "r to stop")


def _stopped(cluster: Cluster, run_id: str, node: str) -> bool:
    """The node started, and its worker let go of it (the lease is held while the
    handler runs)."""
    started = cluster.executions()[(run_id, node, 1)] >= 1
    return started and not cluster.client.runtime.leases.held(lease_key(run_id, node, 1, "run"))
