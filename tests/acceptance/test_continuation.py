"""A step continued in its worker (cairn.workers.step.continuation) on real PostgreSQL,
Redis and Celery workers: its message is an outbox row nobody publishes while the worker
holds its lease, and the relay's doorbell when the worker dies."""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import redis

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster

CHAIN = [f"n{i}" for i in range(1, 11)]


def _row(cluster: Cluster, run_id: str, node: str) -> Any:
    """The outbox row of ``node``'s message, with its execution's end."""
    with psycopg.connect(cluster.settings.database_url) as conn:
        return conn.execute(
            "SELECT o.sent_at, e.finished_at FROM outbox o JOIN node_executions e"
            " ON e.run_id = o.run_id AND e.node = o.payload->>'node'"
            " WHERE o.run_id = %s AND o.payload->>'node' = %s",
            (run_id, node),
        ).fetchone()


def _queued(cluster: Cluster) -> int:
    """Node messages waiting in the broker, across its priority levels."""
    broker = redis.Redis.from_url(str(cluster.settings.broker_url))
    lists = [key for key in broker.keys("cairn*") if broker.type(key) == b"list"]
    return sum(int(broker.llen(key)) for key in lists)


def test_kill_9_right_after_a_commit_it_would_continue_from_runs_the_next_step_once(
    cluster: Cluster,
) -> None:
    """continue.after_commit: n1's result is committed and its worker was to run n2 itself,
    so n2's message was never published. The relay publishes it from the outbox; n2 and
    every node after it runs once."""
    doomed = cluster.spawn(  # threads: the fault point kills the whole worker, not a child
        "worker",
        "--concurrency=1",
        "--pool=threads",
        env={"CAIRN_FAULT_POINTS": "continue.after_commit"},
    )
    run_id = cluster.submit("chain10")
    assert doomed.wait(timeout=30) == -signal.SIGKILL, cluster.log_tails()
    sent_at, finished_at = _row(cluster, run_id, "n2")
    assert sent_at is None and finished_at is None  # in the outbox only: nobody has it
    assert _queued(cluster) == 0
    cluster.scheduler()  # the relay alone: no worker yet
    cluster.wait_for(lambda: _row(cluster, run_id, "n2")[0] is not None, 30, "the relay")
    assert _queued(cluster) >= 1  # published by the relay
    cluster.worker()
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert {node: counts[(run_id, node, 1)] for node in CHAIN} == dict.fromkeys(CHAIN, 1)
    history = [e for e in cluster.client.events(run_id) if not e["type"].startswith("audit.")]
    assert len(history) == 11  # the start and one result per node


def test_a_continued_step_is_not_relayed_while_its_worker_holds_it(cluster: Cluster) -> None:
    """n2 runs 3 s, three relay intervals (CAIRN_OUTBOX_RELAY_AFTER=1), continued from n1:
    its row is unsent all that time, but its lease is held, so the relay leaves it; the
    continued step's own commit marks it sent."""
    worker = cluster.worker(concurrency=1)
    cluster.consuming(worker)
    cluster.scheduler()
    run_id = cluster.submit("chain10", {"slow": {"n2": 3}})
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert {node: counts[(run_id, node, 1)] for node in CHAIN} == dict.fromkeys(CHAIN, 1)
    sent_at, finished_at = _row(cluster, run_id, "n2")
    # Marked by n2's own commit (the same transaction time), not by a relay before it.
    assert sent_at == finished_at
