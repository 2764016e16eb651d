"""Heartbeats: liveness and progress in Redis, shown by `cairn status`."""

from __future__ import annotations

import json

from cairn.orchestrator.statuses import RunStatus
from tests.integration.conftest import Cluster


def cli(cluster: Cluster, *args: str) -> str:
    """`cairn ARGS` against the cluster's services; its standard output."""
    done = cluster.cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def status(cluster: Cluster, run_id: str) -> dict:
    return json.loads(cli(cluster, "status", run_id, "--json"))


def test_status_shows_the_worker_its_progress_and_a_fresh_beat(cluster: Cluster) -> None:
    cluster.worker(concurrency=1)
    run_id = cluster.submit("paging", {"page_s": 2.0})  # running still when the CLI asks
    seen: list[dict] = []

    def reported_progress() -> bool:
        beat = status(cluster, run_id)["heartbeats"].get("read#1")
        if beat and beat.get("done") in ("1", "2"):
            seen.append(beat)
        return bool(seen)

    cluster.wait_for(reported_progress, 30, "progress")
    beat = seen[-1]
    assert beat["total"] == "3"
    assert beat["message"] == f"page {beat['done']}"
    assert ":" in beat["worker"]  # host:pid
    assert beat["age_s"] < 3 * cluster.settings.heartbeat_interval
    fleet = json.loads(cli(cluster, "status", "--fleet", "--json"))
    assert fleet["leases"]["acquired"] >= 1
    (running,) = fleet["running"]
    assert running["lease"].endswith(f"{run_id}:read:1:run")
    assert running["worker"] == beat["worker"]
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED
    assert status(cluster, run_id)["heartbeats"] == {}  # nothing runs: nothing to show


def test_a_killed_worker_stops_beating_and_its_node_turns_suspect(cluster: Cluster) -> None:
    worker = cluster.worker(concurrency=1)
    run_id = cluster.submit("paging", {"page_s": 30.0})
    cluster.wait_for(
        lambda: status(cluster, run_id)["heartbeats"].get("read#1") is not None, 30, "a heartbeat"
    )
    cluster.kill(worker)
    interval = cluster.settings.heartbeat_interval
    # The record outlives the lease (three lease periods) so the silence is visible.
    cluster.wait_for(
        lambda: (
            (status(cluster, run_id)["heartbeats"]["read#1"] or {"age_s": 99})["age_s"]
            > 3 * interval
        ),
        30,
        "three missed beats",
    )
    human = cli(cluster, "status", run_id)
    assert "read#1:" in human
    assert "suspect: no heartbeat for" in human or "waiting for a worker" in human
