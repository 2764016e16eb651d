"""Flower watches a real fleet: `make flower` against the cluster's broker sees the node
tasks of a real run by their workflow/node names, while the run is going and after it,
and each task's state says what became of its message: a node that failed shows
FAILURE, a duplicate delivery shows what it was, never SUCCESS; a step its worker
continued with after a commit is named in the result of the task it followed."""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import redis

from cairn.model.statuses import RunStatus
from cairn.workers.app import NODE_TASK
from cairn.workers.fairness import PRIORITY_STEPS, list_name
from tests.integration.test_lease_metrics import free_ports
from tests.support.cluster import Cluster
from tests.support.services import ROOT

AUTH = "ops:flower-test"  # Flower serves its API only with authentication (or opted out)
NODES = [f"chain10.n{i}" for i in range(1, 11)]


def get(port: int, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(AUTH.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def tasks_of(port: int, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Flower's tasks for one run, by name (the run id is in every node message's args).

    A name may have several tasks: delivery is at-least-once (a relayed or recovered
    message), and the decider ignores the duplicates.
    """
    status, body = get(port, "/api/tasks?limit=1000")
    if status != 200:
        return {}
    tasks: dict[str, list[dict[str, Any]]] = {}
    for task in json.loads(body).values():
        if run_id in (task.get("args") or "") and task.get("name"):
            tasks.setdefault(task["name"], []).append(task)
    return tasks


def states(tasks: dict[str, list[dict[str, Any]]], name: str) -> set[str]:
    return {task["state"] for task in tasks.get(name, [])}


def flower(cluster: Cluster, port: int) -> subprocess.Popen[bytes]:
    """`make flower` as an operator runs it, in its own process group (make and Flower)."""
    log_path = cluster.logs / "flower.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            ["make", "-s", "flower", f"PYTHON={sys.executable}", f"FLOWER_PORT={port}"],
            cwd=ROOT,
            env={**cluster.env, "FLOWER_BASIC_AUTH": AUTH},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process.log_path = log_path  # type: ignore[attr-defined]
    cluster.processes.append(process)  # reaped by the fixture's teardown
    return process


def wait_listening(cluster: Cluster, port: int) -> None:
    """Task events are broadcast, not queued: Flower sees only what happens while it
    listens. The worker's online/heartbeat events in Flower's metrics say it does."""

    def listening() -> bool:
        status, body = get(port, "/metrics")
        return status == 200 and bool(re.search(rb'flower_worker_online\{worker="[^"]+"\} 1', body))

    cluster.wait_for(listening, 30, "Flower to hear the worker's events")


def test_flower_shows_the_node_tasks_of_a_running_workflow(cluster: Cluster) -> None:
    (port,) = free_ports(1)
    process = flower(cluster, port)
    # Every step a task of its own (a worker would otherwise continue n1 into n2...).
    worker = cluster.worker(CAIRN_TASK_EVENTS="true", CAIRN_CONTINUE_STEPS="false")
    # Relay and recovery at their patient pace: a node message published by the fast path
    # is then delivered once, and the slow node's task is the one Flower shows running.
    cluster.scheduler(CAIRN_OUTBOX_RELAY_AFTER="10", CAIRN_RECOVERY_AFTER="10")
    wait_listening(cluster, port)
    assert get(port, "/api/tasks")[0] == 200
    assert get(port, "/healthcheck") == (200, b"OK")

    run_id = cluster.submit("chain10", {"slow": {"n4": 3.0}})

    # During the run: n4 dawdles for 3 s; Flower shows it started, n1..n3 succeeded, and
    # nothing of n5..n10, which are not dispatched yet.
    def running_n4() -> bool:
        tasks = tasks_of(port, run_id)
        return "STARTED" in states(tasks, "chain10.n4") and all(
            "SUCCESS" in states(tasks, name) for name in NODES[:3]
        )

    cluster.wait_for(running_n4, 20, "Flower to show chain10.n4 running after n1..n3")
    assert not set(tasks_of(port, run_id)) & set(NODES[4:])

    assert cluster.wait(run_id, 30).status is RunStatus.SUCCEEDED

    def all_succeeded() -> bool:
        tasks = tasks_of(port, run_id)
        return sorted(tasks) == sorted(NODES) and all(
            "SUCCESS" in states(tasks, name) for name in NODES
        )

    cluster.wait_for(all_succeeded, 10, "Flower to show every node task succeeded")
    after = [task for tasks in tasks_of(port, run_id).values() for task in tasks]
    assert all(task["worker"].startswith("celery@") for task in after)
    assert max(t["runtime"] or 0 for t in after if t["name"] == "chain10.n4") >= 3.0

    # The task-type view lists workflow.node names, not one opaque "cairn.node".
    status, body = get(port, "/api/task/types")
    assert status == 200
    assert set(NODES) <= set(json.loads(body)["task-types"])

    # Stopping make stops Flower with it (one process group): nothing left on the port.
    Cluster.signal(process, signal.SIGTERM)
    process.wait(timeout=10)
    cluster.wait_for(lambda: get(port, "/healthcheck")[0] == 0, 5, "Flower to stop")
    assert worker.poll() is None


# What a delivery of a node message that ran nothing (or nothing committed) may show.
NOT_RUN = {"ALREADY_DONE", "LEASE_HELD", "DISCARDED"}


def node_messages_pending(cluster: Cluster) -> int:
    """Node messages queued, or taken by a worker and neither acknowledged nor rejected."""
    broker = redis.Redis.from_url(cluster.settings.broker_url or "")
    queue = cluster.settings.queue  # a list per priority level (cairn.workers.fairness)
    queued = sum(int(broker.llen(list_name(queue, step))) for step in PRIORITY_STEPS)
    taken = [json.loads(value)[0] for value in broker.hvals("unacked")]
    return queued + sum(message["headers"].get("task") == NODE_TASK for message in taken)


def test_flower_shows_a_failed_node_as_failed_and_a_duplicate_delivery_as_no_success(
    cluster: Cluster,
) -> None:
    (port,) = free_ports(1)
    flower(cluster, port)
    # Task events on from the start (-E), and every node message a worker publishes
    # published twice: each node but the first is delivered once more than it runs.
    cluster.spawn(
        "worker",
        "--concurrency=2",
        "-E",
        env={"CAIRN_DUPLICATE_DELIVERIES": "true", "CAIRN_CONTINUE_STEPS": "false"},
    )
    cluster.scheduler(CAIRN_OUTBOX_RELAY_AFTER="10", CAIRN_RECOVERY_AFTER="10")
    wait_listening(cluster, port)

    # flaky.call fails for good (PermanentError); its error edge runs flaky.fallback.
    failing = cluster.submit("flaky", {"permanent": True})
    chain = cluster.submit("chain10")
    for run_id in (failing, chain):
        assert cluster.wait(run_id, 30).status is RunStatus.SUCCEEDED
    expected = {"flaky.call": 1, "flaky.fallback": 2, "chain10.n1": 1}
    expected |= dict.fromkeys(NODES[1:], 2)

    def settled() -> bool:
        tasks = tasks_of(port, failing) | tasks_of(port, chain)
        return {name: len(tasks.get(name, [])) for name in expected} == expected and not any(
            task["state"] in {"RECEIVED", "STARTED"} for ts in tasks.values() for task in ts
        )

    cluster.wait_for(settled, 20, "Flower to show every delivery's outcome")
    tasks = tasks_of(port, failing) | tasks_of(port, chain)

    # The node that failed: FAILURE, with the node, its error class and its error.
    (call,) = tasks["flaky.call"]
    status, body = get(port, f"/api/task/info/{call['uuid']}")
    assert status == 200
    info = json.loads(body)
    assert info["state"] == "FAILURE"
    assert "NodeFailure" in info["exception"]
    assert (
        "flaky.call failed (permanent): PermanentError: the account does not exist"
        in (info["exception"])
    )

    # Every other node ran once to success; its duplicate delivery shows what it was.
    for name, count in expected.items():
        if name == "flaky.call":
            continue
        found = sorted(task["state"] for task in tasks[name])
        assert found.count("SUCCESS") == 1, (name, found)
        assert set(found) - {"SUCCESS"} <= NOT_RUN, (name, found)
        assert len(found) == count
    duplicates = [t for ts in tasks.values() for t in ts if t["state"] in NOT_RUN]
    assert len(duplicates) == 10
    assert all(t["result"] in {"'already_done'", "'lease_held'", "'discarded'"} for t in duplicates)

    # Acknowledged as before, whatever Flower shows: no node message is left pending.
    cluster.wait_for(lambda: node_messages_pending(cluster) == 0, 10, "every message acked")


def test_flower_names_the_continued_steps_in_the_result_of_the_task_they_followed(
    cluster: Cluster,
) -> None:
    """Continued steps (the default) have no task of their own: the task of the step
    they followed runs them, succeeds, and its result names each with its outcome."""
    (port,) = free_ports(1)
    flower(cluster, port)
    cluster.worker(CAIRN_TASK_EVENTS="true")
    cluster.scheduler(CAIRN_OUTBOX_RELAY_AFTER="10", CAIRN_RECOVERY_AFTER="10")
    wait_listening(cluster, port)
    run_id = cluster.submit("chain10")
    assert cluster.wait(run_id, 30).status is RunStatus.SUCCEEDED

    def continued_in(tasks: dict[str, list[dict[str, Any]]]) -> list[str]:
        named = []
        for task in (t for ts in tasks.values() for t in ts):
            _committed, _, steps = (
                str(task.get("result") or "").strip("'").partition("; continued: ")
            )
            named += [f"chain10.{step.split('#')[0]}" for step in steps.split(", ") if step]
        return named

    def shown() -> bool:
        tasks = tasks_of(port, run_id)
        ran = [t for ts in tasks.values() for t in ts]
        return (
            bool(ran)
            and all(t["state"] == "SUCCESS" for t in ran)
            and (sorted([*tasks, *continued_in(tasks)]) == sorted(NODES))
        )

    cluster.wait_for(shown, 20, "Flower to show every node, as a task or continued in one")
    tasks = tasks_of(port, run_id)
    assert "chain10.n1" in tasks  # the first step is always a task: the submit published it
    continued = continued_in(tasks)
    assert continued and not set(continued) & set(tasks)
    results = [str(t["result"]) for ts in tasks.values() for t in ts]
    assert any(" committed, " in r or r.endswith(" committed'") for r in results if "; " in r)
