"""Durable execution on real PostgreSQL, Redis and Celery workers in subprocesses."""

from __future__ import annotations

import re
import signal
import time

from cairn.decider.graph import decide
from cairn.model.events import Phase, event_from_dict
from cairn.model.messages import NodeMessage
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.workers.app import CeleryPublisher, make_celery
from tests.support.cluster import Cluster

CHAIN = [f"n{i}" for i in range(1, 11)]


def test_a_ten_node_run_succeeds_each_node_once(cluster: Cluster) -> None:
    cluster.worker()
    run_id = cluster.submit("chain10")
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.result is not None and view.result["last"] == "n10"
    counts = cluster.executions()
    assert {node: counts[(run_id, node, 1)] for node in CHAIN} == dict.fromkeys(CHAIN, 1)
    history = cluster.client.events(run_id)
    assert [e["type"] for e in history] == ["run_started"] + ["node_succeeded"] * 10
    assert [e["seq"] for e in history] == list(range(1, 12))
    state = cluster.client.get_run(run_id).state
    assert state is not None and len(state.messages) == 10  # the agent context was kept


def test_branches_routes_and_bounded_loops_run_end_to_end(cluster: Cluster) -> None:
    cluster.worker()
    odd = cluster.submit("branchy", {"number": 3, "kind": "loop"})
    even = cluster.submit("branchy", {"number": 4, "kind": "plain"})
    odd_view, even_view = cluster.wait(odd), cluster.wait(even)
    assert odd_view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert even_view.status is RunStatus.SUCCEEDED
    assert odd_view.state is not None and odd_view.state.visits == {
        "start": 1,
        "odd": 1,
        "route": 3,
        "again": 2,
        "done": 1,
    }
    assert even_view.state is not None and "odd" not in even_view.state.visits


def test_kill_9_of_the_worker_mid_node_resumes_and_runs_finished_nodes_once(
    cluster: Cluster,
) -> None:
    worker = cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("chain10", {"slow": {"n5": 30}})
    cluster.wait_for(lambda: cluster.executions()[(run_id, "n5", 1)] == 1, 30, "n5 to start")
    cluster.kill(worker)  # SIGKILL, mid-node, holding the lease
    cluster.worker()
    # The lease dies with its TTL; the scheduler finds n5 unfinished and dispatches it
    # again (the handler only dawdles on a node's first execution).
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert counts[(run_id, "n5", 1)] == 2  # the killed node ran again, once
    assert {n: counts[(run_id, n, 1)] for n in CHAIN if n != "n5"} == {
        n: 1 for n in CHAIN if n != "n5"
    }
    # A recovery of n5 (the broker may also have redelivered it first) skips what is done.
    for recovered in cluster.client.events(run_id):
        if recovered["type"] == "audit.recovered" and recovered["data"]["node"] == "n5":
            assert recovered["data"]["skipped_done"] == [f"{n}#1" for n in CHAIN[:4]]


def test_the_same_request_id_returns_one_run(cluster: Cluster) -> None:
    first = cluster.submit("chain10", request_id="order-42")
    second = cluster.submit("chain10", request_id="order-42")
    other = cluster.submit("chain10", request_id="order-43")
    assert first == second != other
    with cluster.client.runtime.store.reading() as tx:
        assert len(tx.list_runs(workflow="chain10")) == 2


def test_a_stopped_worker_does_not_block_the_run(cluster: Cluster) -> None:
    """SIGSTOP past the lease: another worker takes the node over (fence 2, recorded in
    PostgreSQL) and finishes; the stale worker, resumed, commits nothing, and its refused
    write is an event of the run."""
    stopped = cluster.worker(concurrency=1)
    cluster.scheduler()
    run_id = cluster.submit("chain10", {"slow": {"n3": 1.5}})
    cluster.wait_for(lambda: cluster.executions()[(run_id, "n3", 1)] == 1, 30, "n3 to start")
    cluster.signal(stopped, signal.SIGSTOP)
    cluster.worker(concurrency=1)
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    cluster.signal(stopped, signal.SIGCONT)
    time.sleep(2.5)  # let the stale worker finish n3 and try to commit
    with cluster.client.runtime.store.reading() as tx:
        executions = {(e.node, e.iteration): e for e in tx.executions_of(run_id)}
    assert all(e.status == "succeeded" for e in executions.values())
    taken_over = executions[("n3", 1)]
    assert taken_over.fence == 2
    events = cluster.client.events(run_id)
    assert [e["type"] for e in events if not e["type"].startswith("audit.")] == [
        "run_started",
        *["node_succeeded"] * 10,
    ]  # no second result was appended
    (stale,) = [e for e in events if e["type"] == "audit.stale_write_rejected"]
    assert stale["data"]["node"] == "n3"
    assert stale["data"]["fence"] == 1
    assert stale["data"]["worker"] != taken_over.worker  # the result is the new holder's
    assert cluster.client.get_run(run_id).status is RunStatus.SUCCEEDED


def _decisions(cluster: Cluster, run_id: str) -> int:
    """Events the decider took: the start and one result per node (audit events, such as
    a recovery's record, are history beside them)."""
    return sum(not e["type"].startswith("audit.") for e in cluster.client.events(run_id))


def _unpublished_runs(cluster: Cluster, count: int, prefix: str) -> list[str]:
    """Runs whose submit crashed right after its commit, before publishing: their first
    messages exist only in the outbox, so only a relay can start them."""
    runs = []
    for index in range(count):
        request_id = f"{prefix}-{index}"
        submitter = cluster.spawn(
            "submit",
            "chain10",
            "--input",
            f'{{"ledger": "{cluster.ledger}"}}',
            "--request-id",
            request_id,
            env={"CAIRN_FAULT_POINTS": "publish.after_commit"},
        )
        assert submitter.wait(timeout=30) == -signal.SIGKILL
        runs.append(cluster.client.submit("chain10", request_id=request_id))
    return runs


def test_kill_9_of_the_scheduler_mid_relay_loses_nothing_and_duplicates_nothing(
    cluster: Cluster,
) -> None:
    # Three submits that crash right after their commit, before publishing: their first
    # messages exist only in the outbox.
    runs = _unpublished_runs(cluster, 3, "crash")
    cluster.worker()
    # The first scheduler publishes the batch, then dies before marking it sent.
    doomed = cluster.scheduler(CAIRN_FAULT_POINTS="relay.after_publish")
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    cluster.scheduler()  # relays the same rows again: duplicates on the broker
    for run_id in runs:
        assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert all(counts[(run_id, node, 1)] == 1 for run_id in runs for node in CHAIN), counts


def test_a_message_delivered_twice_executes_the_node_once(cluster: Cluster) -> None:
    # Celery's line per task says what became of each message.
    cluster.worker(concurrency=2, CAIRN_LOG_TASKS="true")
    cluster.worker(concurrency=1, CAIRN_LOG_TASKS="true")
    publisher = CeleryPublisher(make_celery(cluster.settings), cluster.settings.queue)
    run_id = cluster.submit("chain10", {"slow": {"n1": 1.0}})

    def message(node: str) -> NodeMessage:
        return NodeMessage(run_id, "chain10", 1, node, 1, 1, Phase.RUN)

    publisher.publish([message("n1"), message("n1")])  # while n1 is queued or running
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    publisher.publish([message(node) for node in CHAIN])  # after everything finished
    time.sleep(1.0)
    counts = cluster.executions()
    assert {node: counts[(run_id, node, 1)] for node in CHAIN} == dict.fromkeys(CHAIN, 1)
    assert _decisions(cluster, run_id) == 11
    logs = cluster.log_tails(lines=500)
    results = re.findall(r"succeeded in [0-9.e-]+s: '([^']*)'", logs)
    # Each node committed once: by a task of its own, or continued in one (named in
    # its result: 'committed; continued: n3#1 committed, ...').
    committed = [r for r in results if r.startswith("committed")]
    assert len(committed) + sum(r.count(" committed") for r in committed) == 10
    # n1 went out three times (the run's own and two copies), then every node once more
    assert results.count("already_done") + results.count("lease_held") == 12


def test_two_schedulers_relay_and_recover_at_once_without_double_commits(cluster: Cluster) -> None:
    runs = _unpublished_runs(cluster, 4, "two")
    runs += [cluster.submit("chain10", {"slow": {"n2": 3}}) for _ in range(4)]  # recoveries
    cluster.scheduler()
    cluster.scheduler()
    doomed = cluster.worker(concurrency=2)
    cluster.wait_for(
        lambda: sum(cluster.executions()[(r, "n2", 1)] for r in runs[4:]) >= 1,
        30,
        "a slow node to start",
    )
    cluster.kill(doomed)  # both schedulers now race to recover its nodes
    cluster.worker(concurrency=2)
    for run_id in runs:
        assert cluster.wait(run_id, timeout_s=60).status is RunStatus.SUCCEEDED, cluster.log_tails()
        assert _decisions(cluster, run_id) == 11  # one result per node


def test_a_poison_node_fails_with_max_attempts_while_healthy_runs_succeed(cluster: Cluster) -> None:
    cluster.worker(concurrency=2, CAIRN_MAX_RECOVERIES="2")
    cluster.scheduler(CAIRN_MAX_RECOVERIES="2")
    poison = cluster.submit("poison")
    healthy = [cluster.submit("chain10") for _ in range(20)]
    view = cluster.wait(poison, timeout_s=90)
    assert view.status is RunStatus.FAILED, cluster.log_tails()
    assert view.reason is not None and "max_attempts" in view.reason
    assert cluster.executions()[(poison, "die", 1)] == 2  # ran, died; ran, died; gave up
    for run_id in healthy:
        assert cluster.wait(run_id).status is RunStatus.SUCCEEDED


def test_kill_9_after_a_commit_before_the_ack_runs_nothing_twice(cluster: Cluster) -> None:
    """complete.after_commit: the result is committed and the next node published, the
    broker message is not acked. Its redelivery is a no-op."""
    doomed = cluster.spawn(  # threads: the fault point kills the whole worker, not a child
        "worker",
        "--concurrency=1",
        "--pool=threads",
        env={"CAIRN_FAULT_POINTS": "complete.after_commit"},
    )
    cluster.scheduler()
    run_id = cluster.submit("chain10")
    assert doomed.wait(timeout=30) == -signal.SIGKILL  # right after n1's commit
    cluster.worker()
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert {node: counts[(run_id, node, 1)] for node in CHAIN} == dict.fromkeys(CHAIN, 1)
    assert _decisions(cluster, run_id) == 11


def test_kill_9_of_a_step_carrying_a_snapshot_loses_nothing(cluster: Cluster) -> None:
    """snapshot.before_commit: a step whose write includes a snapshot dies before its
    commit. Nothing of it is stored; the node runs again; every stored snapshot is
    exactly the state its events fold to."""
    every = {"CAIRN_SNAPSHOT_EVERY_EVENTS": "3"}
    doomed = cluster.spawn(
        "worker",
        "--concurrency=1",
        "--pool=threads",
        env={**every, "CAIRN_FAULT_POINTS": "snapshot.before_commit"},
    )
    run_id = cluster.submit("chain10")
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    cluster.worker(**every)
    cluster.scheduler(**every)
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert _decisions(cluster, run_id) == 11  # one result per node
    counts = cluster.executions()
    assert sorted(counts[(run_id, node, 1)] for node in CHAIN) == [1] * 9 + [2]
    orchestrator = cluster.client.runtime.orchestrator
    _row, definition, _state = orchestrator.load(run_id)
    history = [e for e in cluster.client.events(run_id) if not e["type"].startswith("audit.")]
    with orchestrator.store.reading() as tx:
        snapshot_seqs = tx.snapshot_seqs(run_id)
    assert len(snapshot_seqs) >= 3
    for seq in snapshot_seqs:
        with orchestrator.store.reading() as tx:
            snapshot = tx.latest_snapshot(run_id, at_or_before=seq)
        assert snapshot is not None and snapshot.seq == seq
        folded = RunState(run_id, definition.name, definition.version)
        for entry in (e for e in history if e["seq"] <= seq):
            folded = decide(definition, folded, event_from_dict(entry["data"])).state
        assert snapshot.state == folded.to_dict(), f"snapshot at seq {seq}"


def test_kill_9_after_the_handler_returned_before_its_commit(cluster: Cluster) -> None:
    """handler.after_return: the handler's work is done, its result is not committed.
    The node runs again (at-least-once); one result is recorded."""
    doomed = cluster.spawn(
        "worker",
        "--concurrency=1",
        "--pool=threads",
        env={"CAIRN_FAULT_POINTS": "handler.after_return"},
    )
    run_id = cluster.submit("chain10")
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    cluster.worker()
    cluster.scheduler()
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert _decisions(cluster, run_id) == 11
    counts = cluster.executions()
    assert counts[(run_id, "n1", 1)] == 2  # the doomed worker's run of n1 left no result
    assert all(counts[(run_id, node, 1)] == 1 for node in CHAIN[1:])
