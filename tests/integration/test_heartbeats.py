"""Heartbeats: liveness and progress in Redis, shown by `cairn status`."""

from __future__ import annotations

import json
from pathlib import Path

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster


def cli(cluster: Cluster, *args: str) -> str:
    """`cairn ARGS` against the cluster's services; its standard output."""
    done = cluster.cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def status(cluster: Cluster, run_id: str) -> dict:
    return json.loads(cli(cluster, "status", run_id, "--json"))


def test_status_shows_the_worker_its_progress_and_a_fresh_beat(cluster: Cluster) -> None:
    cluster.worker(concurrency=1)
    # Pages long enough for a `cairn status` (a second or more on a busy machine) to land
    # while one is being read, more than once.
    run_id = cluster.submit("paging", {"page_s": 4.0})
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


def test_a_node_that_beats_without_progress_is_flagged_stalled_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Its heartbeats arrive (the lease is renewed) but its progress never moves: past
    its node's stall_after it is flagged — an event, `cairn status` — and left to run."""
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    release = tmp_path / "release"  # the call goes on until the test has looked at it
    run_id = cluster.submit("stalling", {"call_s": 60, "release": str(release)})

    def stalled_events() -> list[dict[str, object]]:
        return [
            event["data"]
            for event in cluster.client.events(run_id)
            if event["type"] == "audit.node_stalled"
        ]

    cluster.wait_for(lambda: bool(stalled_events()), 15, "the stall to be flagged")
    shown = cluster.cli("status", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "stalled on" in shown.stdout and "no progress for" in shown.stdout, shown.stdout
    release.touch()
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED  # flagged, not stopped
    (stall,) = stalled_events()
    assert stall["node"] == "work" and stall["stall_after_s"] == 2.0
    assert float(stall["no_progress_s"]) >= 2.0  # type: ignore[arg-type]
