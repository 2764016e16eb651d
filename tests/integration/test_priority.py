"""Priority and fairness on real services: PostgreSQL, a Redis broker and one Celery
worker of one process. The backlog is queued before the worker starts, so the order in
which its handler starts runs — the handlers' ledger, not cairn's word — is the order the
broker handed them out."""

from __future__ import annotations

from typing import Any

from cairn.client import Client
from cairn.model.statuses import RunStatus
from cairn.workers.fairness import Fairness
from tests.support.cluster import WORKFLOWS, Cluster


def started(cluster: Cluster) -> list[str]:
    """Run ids in the order their node started."""
    if not cluster.ledger.exists():
        return []
    lines = [line.split() for line in cluster.ledger.read_text().splitlines()]
    return [run for run, _node, _iteration, _attempt, what, _pid in lines if what == "start"]


def in_namespaces(cluster: Cluster, *namespaces: str) -> None:
    """Register the workflow in each namespace too (definitions are namespaced)."""
    for namespace in namespaces:
        cluster.client.register(WORKFLOWS / "prioritized.yaml", namespace=namespace)


def batch(cluster: Cluster, count: int, **item: Any) -> list[dict[str, Any]]:
    return [
        {"workflow": "prioritized", "input": {"ledger": str(cluster.ledger)}, **item}
        for _ in range(count)
    ]


def run_all(cluster: Cluster, run_ids: list[str]) -> list[str]:
    """Start the worker and wait for every run; the order they started in."""
    cluster.worker(concurrency=1)
    cluster.wait_for(lambda: len(started(cluster)) >= len(run_ids), 60, "every run to start")
    for run_id in run_ids:
        assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    order = started(cluster)
    assert sorted(order) == sorted(run_ids), "each run's node ran once"
    return order


def test_a_high_priority_run_submitted_after_a_backlog_gets_the_worker_first(
    cluster: Cluster,
) -> None:
    client = cluster.client
    backlog = [s.run_id for s in client.submit_batch(batch(cluster, 40))]
    urgent = cluster.submit("prioritized", priority=3)
    late = [s.run_id for s in client.submit_batch(batch(cluster, 5, priority=-2))]
    assert client.get_run(urgent).priority == 3
    order = run_all(cluster, [*backlog, urgent, *late])  # type: ignore[list-item]
    # Published after 40 others, all queued before the worker started: it is the first
    # the worker takes.
    assert order.index(urgent) == 0, order.index(urgent)
    # The runs below the default priority wait for every default one.
    assert {order.index(run) for run in late} == set(range(41, 46)), order
    # Every message taken off its count: nothing left waiting, nothing counted.
    fairness = Fairness(cluster.settings.broker_url, enabled=True)
    assert fairness.counts(cluster.settings.queue) == {}
    fairness.close()


def test_a_small_namespace_is_not_served_behind_a_big_ones_backlog(cluster: Cluster) -> None:
    client = cluster.client
    in_namespaces(cluster, "big", "small")
    big = [s.run_id for s in client.submit_batch(batch(cluster, 60), namespace="big")]
    small = [s.run_id for s in client.submit_batch(batch(cluster, 5), namespace="small")]
    fairness = Fairness(cluster.settings.broker_url, enabled=True)
    assert fairness.counts(cluster.settings.queue) == {"big": 60, "small": 5}
    order = run_all(cluster, [*big, *small])  # type: ignore[list-item]
    positions = sorted(order.index(run) for run in small)
    # First in, first out, they would start 61st to 65th. Fair, they are served about
    # alternately with the big namespace's first few: band by band (1, 2-3, 4-7 queued),
    # the fifth is at most the 12th run to start.
    assert positions[-1] < 15, positions
    # The big namespace is not starved either: it had runs before the small one's last.
    assert positions[0] <= 2, positions
    assert fairness.counts(cluster.settings.queue) == {}
    fairness.close()


def test_with_fairness_off_the_small_namespace_waits_behind_the_backlog(
    cluster: Cluster,
) -> None:
    """The baseline the test above is measured against: the same queue, first in, first
    out — so the fairness test can fail."""
    unfair = Client(cluster.settings.model_copy(update={"fairness": False}))
    in_namespaces(cluster, "big", "small")
    try:
        big = [s.run_id for s in unfair.submit_batch(batch(cluster, 60), namespace="big")]
        small = [s.run_id for s in unfair.submit_batch(batch(cluster, 5), namespace="small")]
    finally:
        unfair.close()
    order = run_all(cluster, [*big, *small])  # type: ignore[list-item]
    assert sorted(order.index(run) for run in small) == list(range(60, 65))


def test_counts_left_by_lost_messages_are_mended_when_the_queue_is_found_empty(
    cluster: Cluster,
) -> None:
    """A crash can leave a namespace counted for messages no longer queued (published,
    then lost before a worker took them off): its next runs would go in the back bands.
    The scheduler reads every queue's length; an empty queue's counts go with it."""
    fairness = Fairness(cluster.settings.broker_url, enabled=True)
    queue = cluster.settings.queue
    key = f"cairn:fair:{queue}"
    try:
        fairness.client.hset(key, mapping={"big": 500, "small": 3})  # nothing queued
        assert fairness.backlog("gpu") == 0  # another queue's counts are its own
        assert fairness.counts(queue) == {"big": 500, "small": 3}
        in_namespaces(cluster, "small")
        run_id = cluster.submit("prioritized", namespace="small")  # queued: counted in
        assert fairness.counts(queue) == {"big": 500, "small": 4}
        assert 0 < fairness.client.ttl(key) <= 3600  # and forgotten an hour after
        assert fairness.backlog(queue) == 1  # not empty: the counts stay
        assert fairness.counts(queue)["big"] == 500
        cluster.worker(concurrency=1)
        assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
        assert fairness.counts(queue) == {"big": 500, "small": 3}  # taken off: one
        cluster.scheduler()
        cluster.wait_for(lambda: fairness.counts(queue) == {}, 20, "the counts mended")
    finally:
        fairness.close()
