"""Failure semantics with real PostgreSQL, Redis and Celery workers: durable retries,
fallback edges, saga compensation through a crash, cancellation, rollback, and the
requests that must be refused."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cairn.errors import ConfirmationRequired, IllegalTransition, InvalidInput
from cairn.model.statuses import NodeStatus, RunStatus
from tests.support.cluster import Cluster


def _ledger(cluster: Cluster, run_id: str) -> list[list[str]]:
    """The handlers' own record of this run: [node, iteration, attempt, what]."""
    if not cluster.ledger.exists():
        return []
    return [
        line.split()[1:5]
        for line in cluster.ledger.read_text().splitlines()
        if line.startswith(run_id)
    ]


def _history(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    return [e for e in cluster.client.events(run_id) if not e["type"].startswith("audit.")]


def _node(cluster: Cluster, run_id: str, node: str) -> Any:
    view = cluster.client.get_run(run_id)
    assert view.state is not None
    return view.state.nodes.get(node)


# -- retries and fallbacks ----------------------------------------------------------------


def test_a_transient_failure_succeeds_on_attempt_3_and_its_timer_outlives_the_scheduler(
    cluster: Cluster,
) -> None:
    cluster.worker()
    scheduler = cluster.scheduler()
    run_id = cluster.submit("flaky", {"succeed_on": 3})

    def retrying() -> bool:
        node = _node(cluster, run_id, "call")
        return node is not None and node.status is NodeStatus.RETRYING

    cluster.wait_for(retrying, 30, "attempt 1 to fail")
    cluster.kill(scheduler)  # the retry timer (1 s) is a row: nobody sleeps on it
    time.sleep(2.0)
    assert [entry[2] for entry in _ledger(cluster, run_id)] == ["1"]  # nobody fired it
    cluster.scheduler()
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.state is not None and view.state.vars["called_on_attempt"] == 3
    assert _ledger(cluster, run_id) == [
        ["call", "1", "1", "start"],
        ["call", "1", "2", "start"],
        ["call", "1", "3", "start"],
    ]  # one key (call#1) throughout, three attempts
    history = _history(cluster, run_id)
    assert [e["type"] for e in history] == [
        "run_started",
        "node_failed",
        "timer_fired",
        "node_failed",
        "timer_fired",
        "node_succeeded",
    ]
    failed = [e for e in history if e["type"] == "node_failed"]
    fired = [e for e in history if e["type"] == "timer_fired"]
    assert [e["data"]["attempt"] for e in failed] == [1, 2]
    assert all(e["data"]["error_class"] == "transient" for e in failed)
    # The backoff is in the log: 1 s after attempt 1, 2 s after attempt 2 (no jitter),
    # the first one late because no scheduler was running.
    assert fired[0]["at"] - failed[0]["at"] >= 2.0
    assert 2.0 <= fired[1]["at"] - failed[1]["at"] < 4.0
    assert all(["call", "retry", "call"] in e["outcome"]["transitions"] for e in failed)


def test_a_permanent_failure_takes_its_fallback_edge_at_once(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("flaky", {"permanent": True})
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.state is not None and view.state.vars["used_fallback"] is True
    assert [entry[0] for entry in _ledger(cluster, run_id)] == ["call", "fallback"]  # no retry
    (failed,) = [e for e in _history(cluster, run_id) if e["type"] == "node_failed"]
    assert failed["data"]["error_class"] == "permanent"
    assert "does not exist" in failed["data"]["message"]
    assert ["call", "failed:permanent", "fallback"] in failed["outcome"]["transitions"]


# -- compensation ---------------------------------------------------------------------------


def test_compensations_run_in_reverse_order_once_through_a_worker_killed_mid_compensation(
    cluster: Cluster,
) -> None:
    worker = cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("saga", {"slow_undo": {"charge": 30}})
    cluster.wait_for(
        lambda: ["charge", "1", "1", "undo-start"] in _ledger(cluster, run_id),
        30,
        "charge's compensation to start",
    )
    cluster.kill(worker)  # mid-compensation
    cluster.worker()
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.COMPENSATED, cluster.log_tails()
    assert view.reason is not None and "refused the shipment" in view.reason
    effects = [(node, what) for node, _i, _a, what in _ledger(cluster, run_id)]
    assert [e for e in effects if e[1] == "undo"] == [("charge", "undo"), ("reserve", "undo")]
    assert effects.count(("charge", "undo-start")) == 2  # ran again after the kill...
    assert effects.count(("reserve", "undo-start")) == 1  # ...and the rest once
    undone = [
        e["data"]["node"]
        for e in _history(cluster, run_id)
        if e["type"] == "node_succeeded" and e["data"]["phase"] == "compensate"
    ]
    assert undone == ["charge", "reserve"]


# -- cancellation ---------------------------------------------------------------------------


def test_cancel_stops_a_handler_at_its_next_safe_point(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("agent", {"mode": "think", "turns": 600})  # 30 s of thinking
    cluster.wait_for(lambda: bool(_ledger(cluster, run_id)), 30, "thinking to start")
    asked = time.monotonic()
    assert cluster.client.cancel(run_id, "the user closed the chat")
    assert cluster.client.get_run(run_id).status is RunStatus.CANCELLING
    view = cluster.wait(run_id, timeout_s=20)
    stopped_within = time.monotonic() - asked
    assert view.status is RunStatus.CANCELLED, cluster.log_tails()
    assert stopped_within < 10  # a heartbeat or two, not the 30 s call
    assert view.reason == "the user closed the chat"
    assert view.state is not None and "thought" not in view.state.vars
    assert view.state.nodes["think"].status is NodeStatus.CANCELLED
    history = _history(cluster, run_id)
    (requested,) = [e for e in history if e["type"] == "cancel_requested"]
    assert requested["data"]["actor"] == cluster.client.actor  # db:<user>
    assert history[-1]["type"] == "node_cancelled"  # the worker's own acknowledgement
    with pytest.raises(IllegalTransition):  # a finished run cannot be cancelled
        cluster.client.cancel(run_id, "again")
    assert _history(cluster, run_id) == history  # and nothing was written


def test_cancel_detaches_a_call_that_cannot_stop_after_the_cancel_timeout(
    cluster: Cluster,
) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("agent", {"mode": "stubborn", "call_s": 12})
    cluster.wait_for(lambda: bool(_ledger(cluster, run_id)), 30, "the call to start")
    cluster.client.cancel(run_id, "too slow")
    view = cluster.wait(run_id, timeout_s=10)  # cancel_timeout is 2 s
    assert view.status is RunStatus.CANCELLED, cluster.log_tails()
    assert view.state is not None
    stubborn = view.state.nodes["stubborn"]
    assert stubborn.status is NodeStatus.CANCELLED
    assert "detached" in (stubborn.error or "")
    executions = cluster.client.runtime.orchestrator.get_run(run_id, with_executions=True)
    (row,) = [e for e in executions.executions if e["node"] == "stubborn"]
    assert row["status"] == "cancelled"  # its late result will not count


# -- rollback -------------------------------------------------------------------------------


def test_rollback_compensates_every_applied_step_and_needs_confirmation(
    cluster: Cluster,
) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("booking")
    cluster.wait_for(
        lambda: cluster.client.get_run(run_id).status is RunStatus.WAITING, 30, "the wait"
    )
    seq = cluster.client.get_run(run_id).last_seq
    with pytest.raises(ConfirmationRequired):
        cluster.client.rollback(run_id, "customer changed their mind")
    assert cluster.client.get_run(run_id).last_seq == seq  # nothing changed
    cluster.client.rollback(run_id, "customer changed their mind", confirm=True)
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.ROLLED_BACK, cluster.log_tails()
    undone = [node for node, _i, _a, what in _ledger(cluster, run_id) if what == "undo"]
    assert undone == ["charge", "reserve"]
    (requested,) = [e for e in _history(cluster, run_id) if e["type"] == "rollback_requested"]
    assert requested["data"]["actor"] == cluster.client.actor  # db:<user>
    with pytest.raises(IllegalTransition):
        cluster.client.rollback(run_id, "again", confirm=True)


def test_rollback_to_a_checkpoint_undoes_later_steps_and_resumes(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("booking")
    cluster.wait_for(
        lambda: cluster.client.get_run(run_id).status is RunStatus.WAITING, 30, "the wait"
    )
    history = _history(cluster, run_id)
    (reserved,) = [
        e for e in history if e["type"] == "node_succeeded" and e["data"]["node"] == "reserve"
    ]
    last_seq = cluster.client.get_run(run_id).last_seq
    with pytest.raises(InvalidInput, match="no checkpoint at seq 999"):
        cluster.client.rollback(run_id, "typo", confirm=True, to_seq=999)
    assert cluster.client.get_run(run_id).last_seq == last_seq  # nothing changed

    cluster.client.rollback(run_id, "charged the wrong card", confirm=True, to_seq=reserved["seq"])
    # charge is undone and runs again (visit 2); reserve is kept; the run waits again.
    cluster.wait_for(
        lambda: ["charge", "2", "1", "start"] in _ledger(cluster, run_id), 30, "charge again"
    )
    cluster.wait_for(
        lambda: cluster.client.get_run(run_id).status is RunStatus.WAITING, 30, "the wait"
    )
    effects = [(node, iteration, what) for node, iteration, _a, what in _ledger(cluster, run_id)]
    assert [e for e in effects if e[2] == "undo"] == [("charge", "1", "undo")]
    assert [e for e in effects if e[2] == "start"] == [
        ("reserve", "1", "start"),
        ("charge", "1", "start"),
        ("charge", "2", "start"),
    ]
    cluster.client.signal(run_id, "confirmed")
    assert cluster.wait(run_id, timeout_s=30).status is RunStatus.SUCCEEDED


def test_rollback_of_one_step_runs_only_its_compensation(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("booking")
    cluster.wait_for(
        lambda: cluster.client.get_run(run_id).status is RunStatus.WAITING, 30, "the wait"
    )
    cluster.client.rollback(run_id, "seat released", confirm=True, step="reserve")
    cluster.wait_for(
        lambda: ["reserve", "1", "1", "undo"] in _ledger(cluster, run_id), 30, "the undo"
    )
    cluster.wait_for(
        lambda: cluster.client.get_run(run_id).status is RunStatus.WAITING, 30, "the wait again"
    )
    undone = [node for node, _i, _a, what in _ledger(cluster, run_id) if what == "undo"]
    assert undone == ["reserve"]  # charge untouched
    cluster.client.signal(run_id, "confirmed")
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED
    assert [(s.node, s.iteration) for s in view.state.compensable] == [("charge", 1)]  # type: ignore[union-attr]
