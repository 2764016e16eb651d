"""Fencing (PostgreSQL has the last word on which claim may commit) and recovery records,
in-process against real PostgreSQL and Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import update

from cairn.config import Settings
from cairn.lease.redis import RedisLeases
from cairn.model.events import NodeSucceeded
from cairn.model.keys import lease_key
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.runtime import Runtime
from cairn.store.schema import executions
from cairn.workers.runner import Handled
from tests.support.cluster import WORKFLOWS


@pytest.fixture
def runtime(database_url: str, redis_urls: tuple[str, str], tmp_path: Path) -> Iterator[Runtime]:
    built = Runtime.build(
        Settings(
            database_url=database_url,
            redis_url=redis_urls[1],
            home=tmp_path / "home",
            workflows=[str(WORKFLOWS)],
        )
    )
    yield built
    built.close()


def _succeeded(message: NodeMessage, worker: str) -> NodeOutcome:
    event = NodeSucceeded(
        at=0.0,
        node=message.node,
        iteration=message.iteration,
        attempt=message.attempt,
        output={"by": worker},
    )
    return NodeOutcome(event, NodeStatus.SUCCEEDED, result={"by": worker})


def test_a_taken_over_claim_cannot_commit_and_fences_keep_rising_after_redis_forgets(
    runtime: Runtime, redis_urls: tuple[str, str]
) -> None:
    orchestrator, leases = runtime.orchestrator, runtime.leases
    assert isinstance(leases, RedisLeases)
    run_id = orchestrator.submit("chain10", {})
    first = NodeMessage(run_id, "chain10", 1, "n1", 1, 1)
    key = lease_key(run_id, "n1", 1, "run")

    stale = leases.acquire(key, 0.2)
    assert stale is not None and stale.fence == 1  # a first claim: nothing written
    time.sleep(0.3)  # it pauses past its lease...
    newer = leases.acquire(key, 30.0)
    assert newer is not None and newer.fence == 2
    with runtime.store.statements() as tx:  # ...and the takeover is recorded
        assert tx.claim_execution(first.key, 1, newer.fence)
        assert not tx.claim_execution(first.key, 1, stale.fence)  # fences only rise

    refused = orchestrator.complete(first, _succeeded(first, "stale"), "stale", fence=1)
    assert not refused.recorded
    assert orchestrator.fenced_out(first.key, stale.fence)
    accepted = orchestrator.complete(first, _succeeded(first, "newer"), "newer", fence=2)
    assert accepted.recorded
    with runtime.store.reading() as tx:
        (execution,) = [e for e in tx.executions_of(run_id) if e.node == "n1"]
    assert (execution.worker, execution.result, execution.fence) == ("newer", {"by": "newer"}, 2)

    # Redis loses every key: the next claim still outranks what PostgreSQL recorded.
    redis.Redis.from_url(redis_urls[1]).flushdb()
    second = NodeMessage(run_id, "chain10", 1, "n2", 1, 1)
    n2 = lease_key(run_id, "n2", 1, "run")
    lost = leases.acquire(n2, 0.2)
    assert lost is not None
    with runtime.store.statements() as tx:
        tx.claim_execution(second.key, 1, 5)  # say: claims up to fence 5 happened
    time.sleep(0.3)
    redis.Redis.from_url(redis_urls[1]).flushdb()
    after = leases.acquire(n2, 30.0, floor=5)
    assert after is not None and after.fence == 6


def test_a_recovery_is_recorded_with_its_checkpoint_and_what_it_skips(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("chain10", {})
    first = NodeMessage(run_id, "chain10", 1, "n1", 1, 1)
    assert orchestrator.complete(first, _succeeded(first, "w"), "w").recorded
    with runtime.store.transaction() as tx:  # n2's message was lost an hour ago
        tx.connection.execute(
            update(executions)
            .where(executions.c.run_id == run_id, executions.c.node == "n2")
            .values(dispatched_at=datetime.now(UTC) - timedelta(hours=1))
        )
    assert runtime.scheduler.recover() == 1
    (recovered,) = [e for e in orchestrator.events(run_id) if e["type"] == "audit.recovered"]
    assert recovered["data"] == {
        "node": "n2",
        "iteration": 1,
        "attempt": 1,
        "phase": "run",
        "cause": "never claimed or message lost",
        "recoveries": 0,
        "from_seq": 2,
        "snapshot_seq": recovered["data"]["snapshot_seq"],
        "skipped_done": ["n1#1"],
        "type": "audit.recovered",
        "at": recovered["data"]["at"],
    }
    # History only: the run goes on from where it was.
    second = NodeMessage(run_id, "chain10", 1, "n2", 1, 1)
    assert orchestrator.complete(second, _succeeded(second, "w"), "w").recorded
    assert orchestrator.get_run(run_id).state.nodes["n3"].status is NodeStatus.SCHEDULED


def test_a_takeover_by_a_redelivered_message_is_a_recovery_in_the_history(
    runtime: Runtime,
) -> None:
    """A worker dies holding n1's lease (its heartbeat record stays behind); a duplicate
    of n1's message reaches another worker before the scheduler looks: that worker takes
    the execution over, and records it as the recovery it is."""
    orchestrator, leases = runtime.orchestrator, runtime.leases
    run_id = orchestrator.submit("chain10", {})
    key = lease_key(run_id, "n1", 1, "run")
    clean = leases.acquire(key, 30.0, {"worker": "tidy"})
    assert clean is not None and not clean.took_over
    assert leases.release(clean)
    dead = leases.acquire(key, 0.2, {"worker": "doomed"})
    assert dead is not None and not dead.took_over  # its predecessor let go properly
    time.sleep(0.3)  # it dies: the lease runs out, its heartbeat record outlives it

    duplicate = NodeMessage(run_id, "chain10", 1, "n1", 1, 1)
    assert runtime.runner.run(duplicate.to_dict()) is Handled.COMMITTED
    (recovered,) = [e for e in orchestrator.events(run_id) if e["type"] == "audit.recovered"]
    assert recovered["data"]["cause"] == "worker lost; taken over by a redelivered message"
    assert recovered["data"]["recoveries"] == 1
    with runtime.store.reading() as tx:
        (n1,) = [e for e in tx.executions_of(run_id) if e.node == "n1"]
    assert (n1.status, n1.recoveries, n1.fence) == ("succeeded", 1, 3)


def test_a_duplicate_message_never_acknowledges_a_cancel_for_a_running_worker(
    runtime: Runtime,
) -> None:
    """While one worker runs a node, a duplicate of its message reaches another worker of
    a run being cancelled: it must not report the node stopped on the first one's behalf
    (the run would end cancelled while the call goes on, unmarked for reconciliation)."""
    orchestrator, leases = runtime.orchestrator, runtime.leases
    run_id = orchestrator.submit("chain10", {})
    message = NodeMessage(run_id, "chain10", 1, "n1", 1, 1)
    running = leases.acquire(lease_key(run_id, "n1", 1, "run"), 30.0)  # worker A has it
    assert running is not None
    orchestrator.cancel(run_id, "user asked")
    assert runtime.runner.run(message.to_dict()) is Handled.LEASE_HELD
    assert orchestrator.get_run(run_id).status is RunStatus.CANCELLING
    leases.release(running)  # worker A went away without a word
    assert runtime.runner.run(message.to_dict()) is Handled.CANCELLED
    assert orchestrator.get_run(run_id).status is RunStatus.CANCELLED
