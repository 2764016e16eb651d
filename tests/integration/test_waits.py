"""Waiting for people, with real PostgreSQL, Redis and Celery workers: signals, their
refusals, durable wait timeouts (also across a scheduler outage), cancel while waiting,
and the list of runs awaiting someone."""

from __future__ import annotations

import time

import pytest

from cairn.errors import NotWaiting, UnknownSignal
from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster


def _waiting_at(cluster: Cluster, run_id: str, visit: int) -> bool:
    view = cluster.client.get_run(run_id)
    waiting = view.state.waiting_on if view.state is not None else None
    return waiting is not None and waiting.iteration == visit


def _ran(cluster: Cluster, run_id: str, node: str) -> int:
    return sum(
        count for (r, n, _i), count in cluster.executions().items() if (r, n) == (run_id, node)
    )


def test_approve_with_actor_and_payload_and_the_signals_that_are_refused(
    cluster: Cluster,
) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("approval")
    cluster.wait_for(lambda: _waiting_at(cluster, run_id, 1), 30, "the review")
    (entry,) = [e for e in cluster.client.waiting() if e.run_id == run_id]
    assert (entry.node, entry.signals, entry.held) == ("review", ("approve", "reject"), False)
    assert entry.times_out_at is not None and entry.times_out_at - entry.since > 3500

    last_seq = cluster.client.get_run(run_id).last_seq
    with pytest.raises(UnknownSignal):
        cluster.client.signal(run_id, "maybe")
    assert cluster.client.get_run(run_id).last_seq == last_seq  # refused: nothing written

    assert cluster.client.signal(run_id, "approve", {"note": "ship it"}, signal_id="ticket-9")
    assert not cluster.client.signal(run_id, "approve", signal_id="ticket-9")
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.state is not None
    decision = view.state.vars["decisions"]["review"]
    assert (decision["signal"], decision["actor"], decision["payload"]) == (
        "approve",
        cluster.client.actor,  # db:<user>: the CLI's and client's principal
        {"note": "ship it"},
    )
    with pytest.raises(NotWaiting):  # a second decision on a decided wait
        cluster.client.signal(run_id, "reject", signal_id="ticket-10")
    assert [e for e in cluster.client.waiting() if e.run_id == run_id] == []


def test_reject_ends_the_run_failed(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("approval")
    cluster.wait_for(lambda: _waiting_at(cluster, run_id, 1), 30, "the review")
    cluster.client.signal(run_id, "reject")
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.FAILED
    assert _ran(cluster, run_id, "publish") == 0


def test_timeout_escalates_then_an_approval_finishes_the_run(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("escalation")
    cluster.wait_for(lambda: _waiting_at(cluster, run_id, 2), 30, "the second review")
    assert _ran(cluster, run_id, "escalate") == 1
    cluster.client.signal(run_id, "approve")
    assert cluster.wait(run_id, timeout_s=30).status is RunStatus.SUCCEEDED
    timed_out = [
        e
        for e in cluster.client.events(run_id)
        if e["type"] == "timer_fired" and e["data"]["timer_id"].startswith("wait:review:1")
    ]
    assert len(timed_out) == 1


def test_a_wait_timeout_due_while_no_scheduler_runs_fires_once_after_restart(
    cluster: Cluster,
) -> None:
    cluster.worker()
    run_id = cluster.submit("escalation")  # no scheduler: the timer is only a row
    cluster.wait_for(lambda: _waiting_at(cluster, run_id, 1), 30, "the review")
    time.sleep(2.0)  # the 1 s timeout is past due
    assert _waiting_at(cluster, run_id, 1) and _ran(cluster, run_id, "escalate") == 0
    cluster.scheduler()
    cluster.scheduler()  # two at once: the late timer still fires once
    cluster.wait_for(lambda: _waiting_at(cluster, run_id, 2), 30, "the second review")
    assert _ran(cluster, run_id, "escalate") == 1
    fired = [e for e in cluster.client.events(run_id) if e["type"] == "timer_fired"]
    assert [e["data"]["timer_id"] for e in fired] == ["wait:review:1:0"]


def test_cancel_while_waiting_ends_the_run_at_once(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("approval")
    cluster.wait_for(lambda: _waiting_at(cluster, run_id, 1), 30, "the review")
    cluster.client.cancel(run_id, "withdrawn")
    view = cluster.client.get_run(run_id)
    assert view.status is RunStatus.CANCELLED  # nothing was running: no draining
    assert view.reason == "withdrawn"
    with pytest.raises(NotWaiting):
        cluster.client.signal(run_id, "approve")
    assert [e for e in cluster.client.waiting() if e.run_id == run_id] == []
