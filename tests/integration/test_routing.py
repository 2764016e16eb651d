"""Routing on real services: PostgreSQL, a Redis broker, and two Celery workers — one
started with ``cairn worker --queues gpu``, one on the default queue. The handler of
every node records the role of the worker process that ran it (an environment marker),
so where each node ran is the handlers' word, not cairn's."""

from __future__ import annotations

import json
import re
import time

from cairn.model.statuses import NodeStatus, RunStatus
from tests.support.cluster import Cluster

# Every process of the deployment declares its queues: the workers and the scheduler
# register CAIRN_WORKFLOWS (routed.yaml names gpu) under the same declaration.
DECLARED = {"CAIRN_QUEUES": "gpu"}


def ran_on(cluster: Cluster, run_id: str) -> dict[str, list[str]]:
    """Node -> the roles of the workers that ran it, by the handlers' ledger."""
    roles: dict[str, list[str]] = {}
    if cluster.ledger.exists():
        for line in cluster.ledger.read_text().splitlines():
            run, node, _iteration, _attempt, what, _pid = line.split()
            if run == run_id and what.startswith("on:"):
                roles.setdefault(node, []).append(what.removeprefix("on:"))
    return roles


def test_a_gpu_node_waits_for_a_gpu_worker_and_runs_only_there(cluster: Cluster) -> None:
    default = cluster.worker(
        concurrency=1, CAIRN_TEST_WORKER_ROLE="default", CAIRN_LOG_TASKS="true", **DECLARED
    )
    cluster.scheduler(**DECLARED)
    cluster.consuming(default)
    publisher = cluster.client.runtime.orchestrator.publisher

    waiting = cluster.submit("routed")
    cluster.wait_for(
        lambda: ran_on(cluster, waiting).get("prepare") == ["default"], 30, "prepare to run"
    )
    # (At least once: the relay may have sent a copy too, before its sent-mark landed.)
    cluster.wait_for(lambda: (publisher.backlog("gpu") or 0) >= 1, 10, "render queued on gpu")
    # No worker consumes gpu: render stays queued, over several recovery periods, and
    # the default worker (whose queue is empty) never takes it. Nor does recovery send
    # it again: its own queue is not empty, whatever the default queue says.
    time.sleep(3 * cluster.settings.recovery_after)
    view = cluster.client.get_run(waiting)
    assert view.status is RunStatus.RUNNING, cluster.log_tails()
    assert view.state is not None
    assert view.state.nodes["render"].status is NodeStatus.SCHEDULED
    assert "render" not in ran_on(cluster, waiting)
    assert publisher.backlog() == 0
    assert (publisher.backlog("gpu") or 0) >= 1
    events = cluster.client.events(waiting)
    assert not [e for e in events if e["type"] == "audit.recovered"], events
    # What an operator sees: the gpu queue filling while the default one is empty.
    fleet = cluster.cli("status", "--fleet", "--json", env=DECLARED)
    assert fleet.returncode == 0, fleet.stderr
    queued = json.loads(fleet.stdout)["queues"]
    assert queued["cairn"] == 0 and queued["gpu"] >= 1, queued
    text = cluster.cli("status", "--fleet", env=DECLARED).stdout
    # (The count may have grown: past 10 recovery periods a copy is sent, by design.)
    assert re.search(r"^queued: cairn 0, gpu [1-9]\d*$", text, re.MULTILINE), text

    gpu = cluster.spawn(
        "worker",
        "--concurrency=1",
        "--queues=gpu",
        env={"CAIRN_TEST_WORKER_ROLE": "gpu", "CAIRN_LOG_TASKS": "true", **DECLARED},
    )
    assert cluster.wait(waiting).status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert ran_on(cluster, waiting) == {
        "prepare": ["default"],
        "render": ["gpu"],
        "publish": ["default"],
    }

    # Both running: each node still goes only where its queue says, run after run.
    cluster.consuming(gpu)
    runs = [cluster.submit("routed") for _ in range(4)]
    for run_id in runs:
        view = cluster.wait(run_id)
        assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
        assert ran_on(cluster, run_id) == {
            "prepare": ["default"],
            "render": ["gpu"],
            "publish": ["default"],
        }
        assert view.state is not None
        assert view.state.vars["render"] == "gpu"
    cluster.wait_for(
        lambda: (publisher.backlog(), publisher.backlog("gpu")) == (0, 0), 10, "both queues drained"
    )
    gpu_log = gpu.log_path.read_text()  # type: ignore[attr-defined]
    assert "Task routed.render[" in gpu_log
    assert "Task routed.prepare[" not in gpu_log and "Task routed.publish[" not in gpu_log
    default_log = default.log_path.read_text()  # type: ignore[attr-defined]
    assert "Task routed.render[" not in default_log


def test_a_worker_refuses_to_start_when_a_definition_names_an_undeclared_queue(
    cluster: Cluster,
) -> None:
    """The integration workflows include routed.yaml (queue gpu): a deployment that
    declares only other queues cannot register it, so its workers do not start."""
    worker = cluster.worker(concurrency=1, CAIRN_QUEUES="cpu")
    assert worker.wait(timeout=60) != 0
    log = worker.log_path.read_text()  # type: ignore[attr-defined]
    assert "queue 'gpu' is not one this deployment's workers consume" in log
    assert "(CAIRN_QUEUES and the default queue: cairn, cpu)" in log
