"""A fork's branches published as fewer messages than branches (cairn.engine.grouping) on
real PostgreSQL, Redis and Celery workers: a lead's worker runs its siblings after it,
each marked sent by its own commit; a slow branch holds none of its siblings back (they
are spilled and run elsewhere meanwhile); and a worker killed -9 mid-group loses nothing
— the siblings' unsent rows are relayed, and every branch that finished ran once."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster

BRANCHES = [f"b{index}" for index in range(1, 9)]
SIBLINGS = BRANCHES[2:]  # eight go as two messages: b1 carries b3, b5, b7; b2 the rest


def _rows(cluster: Cluster, run_id: str, *, every: bool = False, branch: str = "b") -> list[Any]:
    """Each branch's outbox row, sent or not, beside its execution's start and end (if
    it ran; ``every``: those that did not too)."""
    join = "LEFT JOIN" if every else "JOIN"
    with psycopg.connect(cluster.settings.database_url) as conn:
        return conn.execute(
            "SELECT o.payload->>'node', o.sent_at,"
            " e.finished_at - make_interval(secs => e.duration_s), e.finished_at"
            f" FROM outbox o {join} node_executions e"
            " ON e.run_id = o.run_id AND e.node = o.payload->>'node' AND e.finished_at IS NOT NULL"
            " WHERE o.run_id = %s AND o.payload->>'node' LIKE %s ORDER BY 1",
            (run_id, f"{branch}%"),
        ).fetchall()


def test_grouped_branches_run_once_each_across_two_workers(cluster: Cluster) -> None:
    for _ in range(2):  # no spill: a loaded machine may take 50 ms over a group
        cluster.consuming(cluster.worker(CAIRN_BRANCH_SPILL_AFTER="60"))
    cluster.scheduler()
    run_ids = [cluster.submit("fan_merge") for _ in range(6)]
    cluster.all_succeeded(run_ids, timeout_s=60)
    counts = cluster.executions()
    for run_id in run_ids:
        assert {b: counts[(run_id, b, 1)] for b in [*BRANCHES, "after"]} == dict.fromkeys(
            [*BRANCHES, "after"], 1
        )
    # A sibling's row is marked sent by its own commit (the same transaction time): it
    # was carried by its lead's message, never published on its own.
    carried = [
        node
        for run_id in run_ids
        for node, sent, _start, end in _rows(cluster, run_id)
        if sent == end
    ]
    assert carried, cluster.log_tails()


def test_a_slow_branch_holds_none_of_its_siblings_back(cluster: Cluster) -> None:
    """Eight branches of two seconds each on eight slots: each lead's siblings are spilled
    50 ms into its group and taken by idle slots — every branch starts before any ends."""
    cluster.consuming(cluster.spawn("worker", "--concurrency=8", "--pool=threads"))
    run_id = cluster.submit("fan_merge", {"slow": dict.fromkeys(BRANCHES, 2)})
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    rows = _rows(cluster, run_id)
    assert len(rows) == len(BRANCHES)
    assert max(start for _n, _s, start, _e in rows) < min(end for _n, _s, _st, end in rows)


def test_async_branches_grouped_where_unknown_are_awaited_together(cluster: Cluster) -> None:
    """The test's client loads definitions without their code, so it cannot tell the
    eight branches are async and groups them; the worker — one pool process — publishes
    each async sibling on its own, and all eight await their two seconds at once on its
    loop instead of one after another holding the slot."""
    cluster.consuming(cluster.worker(1))
    run_id = cluster.submit("fan_ponder", {"ponder_s": 2})
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    rows = _rows(cluster, run_id, branch="p")
    assert len(rows) == len(BRANCHES)
    assert max(start for _n, _s, start, _e in rows) < min(end for _n, _s, _st, end in rows)


def test_a_queued_leads_siblings_wait_with_it_and_are_not_relayed(cluster: Cluster) -> None:
    """No worker yet: both leads wait in the queue, their six siblings' rows unsent. The
    relay (rows older than a second here) leaves them while the queue has a backlog, as
    recovery leaves a queued execution."""
    cluster.scheduler(CAIRN_RECOVERY_AFTER="60")
    run_id = cluster.submit("fan_merge")
    time.sleep(4)  # four relay intervals
    unsent = {node for node, sent, _start, _end in _rows(cluster, run_id, every=True) if not sent}
    assert unsent >= set(SIBLINGS), unsent
    # Once the worker has taken the leads the queue is empty: a relay pass before their
    # siblings have run may publish those too — a duplicate, which runs nothing twice.
    cluster.consuming(cluster.worker())
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert {b: counts[(run_id, b, 1)] for b in BRANCHES} == dict.fromkeys(BRANCHES, 1)


def test_kill_9_mid_group_relays_the_siblings_and_repeats_nothing_that_finished(
    cluster: Cluster,
) -> None:
    """The doomed worker runs one lead at a time and spills nothing for a minute: killed
    while its lead dawdles, the siblings it carried have not begun. Their rows, unsent
    with no lease held, are relayed; the lead's lapsed claim is recovered."""
    doomed = cluster.spawn(
        "worker",
        "--concurrency=1",
        "--pool=threads",
        env={"CAIRN_BRANCH_SPILL_AFTER": "60"},
    )
    cluster.consuming(doomed)
    run_id = cluster.submit("fan_merge", {"slow": {"b1": 8, "b2": 8}})

    def a_lead_started() -> bool:
        counts = cluster.executions()
        return bool(counts[(run_id, "b1", 1)] or counts[(run_id, "b2", 1)])

    cluster.wait_for(a_lead_started, 30, "a lead to start")
    started = {b for b in BRANCHES if cluster.executions()[(run_id, b, 1)]}
    assert len(started) == 1, started  # the lead alone: its siblings wait in its group
    cluster.kill(doomed)
    cluster.worker()
    cluster.scheduler()
    assert cluster.wait(run_id, 90).status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    for branch in BRANCHES:
        again = 2 if branch in started else 1  # the lead ran again: it was killed mid-node
        assert counts[(run_id, branch, 1)] == again, (branch, counts)
    assert counts[(run_id, "after", 1)] == 1
