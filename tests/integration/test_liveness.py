"""A deaf worker (alive, but no longer consuming) fails `cairn probe worker`; a busy one
and one that reconnected do not."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from cairn.model.statuses import RunStatus
from cairn.workers.app import make_celery
from cairn.workers.liveness import check
from tests.support.cluster import Cluster

INTERVAL_S = 0.2
MAX_AGE_S = 2.5


def live_worker(cluster: Cluster, path: Path, concurrency: int = 2) -> subprocess.Popen[bytes]:
    worker = cluster.worker(
        concurrency,
        CAIRN_LIVENESS_INTERVAL=str(INTERVAL_S),
        CAIRN_LIVENESS_FILE=str(path),
    )
    cluster.wait_for(lambda: check(path, MAX_AGE_S).live, 60, "the worker's first ping")
    return worker


def record(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def probe(cluster: Cluster, path: Path) -> subprocess.CompletedProcess[str]:
    return cluster.cli("probe", "worker", "--file", str(path), "--max-age", str(MAX_AGE_S))


def test_a_worker_that_stops_consuming_fails_its_probe(cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "worker.alive"
    worker = live_worker(cluster, path)
    live = probe(cluster, path)
    assert live.returncode == 0, live.stderr
    assert live.stdout.startswith("live: worker celery@")
    run_id = cluster.submit("chain10")  # pings beside node messages disturb nothing
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED

    # Deaf as after the reconnect bug: the process lives, the consumer takes nothing.
    node = record(path)["node"]
    control = make_celery(cluster.settings).control
    queues = [q["name"] for q in control.inspect([node], timeout=5).active_queues()[node]]
    assert cluster.settings.queue in queues
    assert any(name.startswith("cairn.ping.") for name in queues)
    for name in queues:
        control.cancel_consumer(name, destination=[node], reply=True, timeout=5)
    cluster.wait_for(lambda: not check(path, MAX_AGE_S).live, MAX_AGE_S + 10, "the probe to fail")

    assert worker.poll() is None
    assert control.ping([node], timeout=5)  # Celery's own ping cannot tell
    deaf = probe(cluster, path)
    assert deaf.returncode == 1, deaf.stdout
    assert "deaf: worker celery@" in deaf.stderr


def test_a_worker_busy_with_a_long_node_stays_live(cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "worker.alive"
    live_worker(cluster, path, concurrency=1)
    run_id = cluster.submit("chain10", {"slow": {"n1": 2 * MAX_AGE_S}})
    cluster.wait_for(
        lambda: str(record(path).get("reason", "")).startswith("busy"), 30, "a busy record"
    )
    # Its only prefetch slot holds the slow node, so its ping waits: busy, not deaf.
    while cluster.executions()[(run_id, "n2", 1)] == 0:
        assert check(path, MAX_AGE_S).live, record(path)
        time.sleep(0.05)
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED
    freed_at = time.time()
    cluster.wait_for(
        lambda: (record(path).get("last_ping_at") or 0) > freed_at, 30, "a ping after the node"
    )


def test_a_worker_whose_connections_were_killed_is_live_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    path = tmp_path / "worker.alive"
    live_worker(cluster, path)
    broker = redis.Redis.from_url(cluster.settings.broker_url or "")
    # Only this test's db: CLIENT KILL TYPE normal would cut every parallel test's links.
    db = broker.connection_pool.connection_kwargs.get("db", 0)
    mine = broker.client_id()
    doomed = [c["id"] for c in broker.client_list() if int(c["db"]) == db and int(c["id"]) != mine]
    assert doomed
    for client_id in doomed:
        broker.client_kill_filter(_id=client_id)
    killed_at = time.time()
    cluster.wait_for(
        lambda: (record(path).get("last_ping_at") or 0) > killed_at,
        30,
        "a ping consumed after the reconnect",
    )
    assert check(path, MAX_AGE_S).live
    run_id = cluster.submit("chain10")
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED
