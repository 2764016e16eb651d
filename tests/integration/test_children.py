"""Budgets and child runs on real PostgreSQL, Redis and Celery workers: a branch that
burns its part of the budget fails alone while its siblings finish; a branch that is a
child workflow run, linked to its parent by a correlation id in both histories; a
cancelled parent takes its child with it."""

from __future__ import annotations

import signal
from typing import Any

from cairn.model.state import BranchOutcome
from cairn.model.statuses import NodeStatus, RunStatus
from tests.support.cluster import Cluster


def _events(cluster: Cluster, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in cluster.client.events(run_id) if e["type"] == kind]


def _seq(cluster: Cluster, run_id: str, kind: str, node: str) -> int:
    return next(
        e["seq"]
        for e in cluster.client.events(run_id)
        if e["type"] == kind and e["data"]["node"] == node
    )


def test_a_branch_that_exhausts_its_budget_fails_alone_and_its_siblings_finish(
    cluster: Cluster,
) -> None:
    cluster.worker(concurrency=3)
    cluster.scheduler()
    run_id = cluster.submit(
        "research_budget",
        {
            "calls": {"web": 1000, "papers": 7, "code": 7, "write": 2},
            "call_s": {"web": 0.02, "papers": 0.3, "code": 0.3},
        },
    )
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    state = view.state
    assert state is not None
    # The fan-out may spend 2,400 tokens: 800 per branch. `web` stopped at its ninth call
    # (the one that went over counts: it was spent); nothing was taken from the others.
    web = state.nodes["web"]
    assert web.status is NodeStatus.FAILED and "BudgetExceeded" in (web.error or "")
    assert web.spent == {"tokens": 900.0}
    share = {"tokens": 800.0}
    assert state.joins["fan"].allowances == {"web": share, "papers": share, "code": share}
    assert state.joins["fan"].outcomes == {
        "web": BranchOutcome.DEFAULTED,
        "papers": BranchOutcome.SUCCEEDED,
        "code": BranchOutcome.SUCCEEDED,
    }
    assert (state.vars["papers_tokens"], state.vars["code_tokens"]) == (700.0, 700.0)
    assert state.vars["web_tokens"] == "over budget"
    # The siblings were still running when `web` ran out, and went on to finish.
    failed_at = _seq(cluster, run_id, "node_failed", "web")
    for sibling in ("papers", "code"):
        assert _seq(cluster, run_id, "node_succeeded", sibling) > failed_at
    assert state.spent == {"tokens": 900.0 + 700 + 700 + 200}
    assert cluster.executions()[(run_id, "web", 1)] == 1  # one attempt: no retry for this


def test_a_branch_can_be_a_child_workflow_run(cluster: Cluster) -> None:
    cluster.worker(concurrency=2)
    cluster.scheduler()
    run_id = cluster.submit("trip", {"calls": {"search": 4}})
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    state = view.state
    assert state is not None
    child_id = state.nodes["flights"].child
    assert child_id is not None
    child = cluster.client.get_run(child_id)
    assert child.status is RunStatus.SUCCEEDED
    assert child.workflow == "flight_search"
    # Linked both ways by one correlation id: in the child's first event and in the
    # parent's event that took the child's result.
    (started,) = _events(cluster, child_id, "run_started")
    (finished,) = _events(cluster, run_id, "child_finished")
    assert started["parent"]["run_id"] == run_id
    assert started["parent"]["correlation_id"] == finished["correlation_id"]
    assert finished["child_run_id"] == child_id and finished["status"] == "succeeded"
    # Only the fields the node asks for come back; what the child spent counts here too,
    # and the child could spend no more than the branch's part (half of 2,000).
    assert state.vars["found"] == "LH 123" and "picked_by" not in state.vars
    assert started["budget"] == {"tokens": 1000.0}
    assert state.spent == {"tokens": 400.0} and state.nodes["flights"].spent == {"tokens": 400.0}
    counts = cluster.executions()
    assert counts[(child_id, "search", 1)] == 1 and counts[(child_id, "pick", 1)] == 1
    assert counts[(run_id, "hotel", 1)] == 1 and counts[(run_id, "book", 1)] == 1


def test_cancelling_a_parent_cancels_its_child(cluster: Cluster) -> None:
    cluster.worker(concurrency=2)
    cluster.scheduler()
    run_id = cluster.submit(
        "trip", {"calls": {"search": 600}, "call_s": {"search": 0.05}, "tokens_per_call": 1}
    )

    def child_searching() -> bool:
        state = cluster.client.get_run(run_id).state
        child = state.nodes["flights"].child if state and "flights" in state.nodes else None
        return child is not None and cluster.executions()[(child, "search", 1)] == 1

    cluster.wait_for(child_searching, 30, "the child's search to start")
    cluster.client.cancel(run_id, "changed plans")
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.CANCELLED, cluster.log_tails()
    assert view.state is not None
    child_id = view.state.nodes["flights"].child
    assert child_id is not None
    child = cluster.wait(child_id, timeout_s=30)
    assert child.status is RunStatus.CANCELLED
    (requested,) = _events(cluster, child_id, "cancel_requested")
    assert requested["actor"] == f"run {run_id}" and "changed plans" in requested["reason"]
    assert child.state is not None and child.state.nodes["search"].status is NodeStatus.CANCELLED


def test_kill_9_between_a_childs_end_and_its_parent_hearing_of_it(cluster: Cluster) -> None:
    """inbox.after_commit: the child's last step is committed with the event for its
    parent; the worker dies before applying it. The scheduler applies it, once."""
    doomed = cluster.spawn(  # threads: the fault point kills the whole worker, not a child
        "worker",
        "--concurrency=1",
        "--pool=threads",
        env={"CAIRN_FAULT_POINTS": "inbox.after_commit"},
    )
    cluster.scheduler()
    run_id = cluster.submit("trip", {"calls": {"search": 1}})
    assert doomed.wait(timeout=30) == -signal.SIGKILL  # right after the child's last commit
    cluster.worker()
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.state is not None
    child_id = view.state.nodes["flights"].child
    assert child_id is not None
    assert len(_events(cluster, run_id, "child_finished")) == 1
    counts = cluster.executions()
    assert counts[(child_id, "search", 1)] == 1 and counts[(child_id, "pick", 1)] == 1
    with cluster.client.runtime.store.reading() as tx:
        assert tx.posted(10) == []
