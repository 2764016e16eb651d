"""Recovery tiers, step by step, in-process against real PostgreSQL and Redis: an
irreversible node a worker may have started waits for an operator; one whose message was
merely lost recovers by itself; the operator's decisions; on_resume re-planning."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import select, update

from cairn.config import Settings
from cairn.errors import NotWaiting
from cairn.model.events import CancelRequested, stamped
from cairn.model.keys import lease_key
from cairn.model.messages import NodeMessage
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.runtime import Runtime
from cairn.scheduler.recovery import QUEUED_PATIENCE
from cairn.store.schema import executions
from cairn.workers.runner import Handled
from tests.support.cluster import WORKFLOWS, Cluster


class Captured:
    """A publisher that keeps what it is given: the test plays the broker."""

    def __init__(self) -> None:
        self.messages: list[NodeMessage] = []
        self.queued: int | None = None  # what the broker says is waiting in the queue

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        self.messages.extend(messages)
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        return self.queued

    def take(self, node: str) -> NodeMessage:
        found = [m for m in self.messages if m.node == node]
        assert found, f"{node} was not published; published: {self.messages}"
        self.messages.remove(found[-1])
        return found[-1]


@pytest.fixture(params=["postgresql+redis", "embedded"])
def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    """The servers, and the embedded default (SQLite, in-process leases): same rules."""
    servers: dict[str, Any] = {}
    if request.param == "postgresql+redis":
        servers = {
            "database_url": request.getfixturevalue("database_url"),
            "redis_url": request.getfixturevalue("redis_urls")[1],
        }
    # The runner's own leases outlive a loaded machine's stalls (0.3 s did not: a late
    # heartbeat lost the lease of a step the test expects committed); the workers these
    # tests kill hold leases of 0.2 s of their own.
    built = _built(tmp_path, lease_ttl=3, heartbeat_interval=1, **servers)
    yield built
    built.close()


def _built(tmp_path: Path, **settings: Any) -> Runtime:
    """A runtime on the test workflows whose publisher the test plays (every step
    published: the test takes each message)."""
    built = Runtime.build(
        Settings(
            home=tmp_path / "home", workflows=[str(WORKFLOWS)], continue_steps=False, **settings
        )
    )
    built.orchestrator.publisher = Captured()
    return built


@pytest.fixture
def broker(runtime: Runtime) -> Captured:
    publisher = runtime.orchestrator.publisher
    assert isinstance(publisher, Captured)
    return publisher


def _ledger(tmp_path: Path) -> list[str]:
    path = tmp_path / "ledger.txt"
    return path.read_text().splitlines() if path.exists() else []


def _execution(runtime: Runtime, run_id: str, node: str) -> Any:
    with runtime.store.reading() as tx:
        return tx.connection.execute(
            select(executions).where(executions.c.run_id == run_id, executions.c.node == node)
        ).one()


def _stall(runtime: Runtime, run_id: str, node: str, ago: timedelta = timedelta(hours=1)) -> None:
    """Make the execution look dispatched an hour ago: recovery looks at it now."""
    with runtime.store.transaction() as tx:
        tx.connection.execute(
            update(executions)
            .where(executions.c.run_id == run_id, executions.c.node == node)
            .values(dispatched_at=datetime.now(UTC) - ago)
        )


def _claim_and_die(runtime: Runtime, message: NodeMessage) -> None:
    """What a worker killed mid-node leaves behind: its claim recorded in PostgreSQL, its
    heartbeat record in Redis, and a lease that runs out."""
    lease = runtime.leases.acquire(
        lease_key(message.run_id, message.node, message.iteration, message.phase.value),
        0.2,
        {"worker": "doomed"},
    )
    assert lease is not None
    with runtime.store.statements(writes=True) as tx:
        assert tx.claim_execution(message.key, message.attempt, lease.fence, first=True)
    time.sleep(0.3)


def test_an_irreversible_claim_is_recorded_once_per_attempt(
    runtime: Runtime, broker: Captured
) -> None:
    run_id = runtime.orchestrator.submit("pay", {})
    charge = broker.take("charge")
    with runtime.store.statements(writes=True) as tx:
        assert tx.claim_execution(charge.key, 1, 1, first=True)
    assert _execution(runtime, run_id, "charge").status == "running"
    with runtime.store.statements(writes=True) as tx:  # a second claim of attempt 1
        assert not tx.claim_execution(charge.key, 1, 2, first=True)
        assert tx.claim_execution(charge.key, 1, 2)  # a takeover (not first) may


def test_an_irreversible_node_whose_worker_died_waits_for_an_operator(
    runtime: Runtime, broker: Captured, tmp_path: Path
) -> None:
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("pay", {"ledger": str(tmp_path / "ledger.txt")})
    charge = broker.take("charge")
    _claim_and_die(runtime, charge)

    # The broker redelivers the message: a worker must not run what may have taken effect.
    assert runtime.runner.run(charge.to_dict()) is Handled.UNCONFIRMED
    assert _ledger(tmp_path) == []

    _stall(runtime, run_id, "charge")
    assert runtime.scheduler.recover() == 1
    assert broker.messages == []  # held, not dispatched again
    view = orchestrator.get_run(run_id)
    assert view.status is RunStatus.WAITING
    assert view.state is not None
    (held, _phase), *_ = view.state.held
    assert held.node == "charge" and held.status is NodeStatus.HELD
    assert _execution(runtime, run_id, "charge").status == "held"
    (event,) = [e for e in orchestrator.events(run_id) if e["type"] == "node_held"]
    assert event["data"]["reason"].startswith("irreversible: its worker died running it")
    assert runtime.scheduler.recover() == 0  # a held execution is left alone
    assert runtime.runner.run(charge.to_dict()) is Handled.ALREADY_DONE

    # The operator checked with the payment provider: it was charged.
    orchestrator.signal(
        run_id,
        "recovery.complete",
        {"output": {"charge_id": "ch_42"}},
        actor="alice",
        signal_id="ticket-7",
    )
    row = _execution(runtime, run_id, "charge")
    assert (row.status, row.result, row.worker) == ("succeeded", {"charge_id": "ch_42"}, "operator")
    last_seq = orchestrator.get_run(run_id).last_seq
    with pytest.raises(NotWaiting):  # a second decision is refused and writes nothing
        orchestrator.signal(run_id, "recovery.retry", actor="bob")
    assert orchestrator.signal(run_id, "recovery.complete", signal_id="ticket-7").ignored
    assert orchestrator.get_run(run_id).last_seq == last_seq

    ship = broker.take("ship")
    assert runtime.runner.run(ship.to_dict()) is Handled.COMMITTED
    view = orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED
    assert view.state is not None and view.state.vars["charge_id"] == "ch_42"
    assert [line.split()[1] for line in _ledger(tmp_path)] == ["ship"]  # charge never re-ran
    decided = [e for e in orchestrator.events(run_id) if e["type"] == "signal_received"]
    assert decided[0]["data"]["actor"] == "alice"


def test_the_operator_may_run_it_again_as_a_new_resumed_attempt(
    runtime: Runtime, broker: Captured, tmp_path: Path
) -> None:
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("pay", {"ledger": str(tmp_path / "ledger.txt")})
    charge = broker.take("charge")
    _claim_and_die(runtime, charge)
    _stall(runtime, run_id, "charge")
    runtime.scheduler.recover()
    orchestrator.signal(run_id, "recovery.retry", actor="alice")

    again = broker.take("charge")
    assert (again.attempt, again.resumed) == (2, True)
    assert runtime.runner.run(charge.to_dict()) is Handled.ALREADY_DONE  # attempt 1 is over
    assert runtime.runner.run(again.to_dict()) is Handled.COMMITTED
    runtime.runner.run(broker.take("ship").to_dict())
    assert orchestrator.get_run(run_id).status is RunStatus.SUCCEEDED
    assert [line.split()[1:4] for line in _ledger(tmp_path)] == [
        ["charge", "1", "2"],
        ["ship", "1", "1"],
    ]


def test_an_irreversible_node_never_claimed_recovers_by_itself(
    runtime: Runtime, broker: Captured, tmp_path: Path
) -> None:
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("pay", {"ledger": str(tmp_path / "ledger.txt")})
    broker.take("charge")  # the message is lost: no worker ever claimed it
    _stall(runtime, run_id, "charge")
    assert runtime.scheduler.recover() == 1
    again = broker.take("charge")
    assert (again.attempt, again.resumed) == (1, True)
    assert runtime.runner.run(again.to_dict()) is Handled.COMMITTED
    assert orchestrator.get_run(run_id).state.nodes["charge"].status is NodeStatus.SUCCEEDED


def test_a_never_claimed_execution_waits_while_the_queue_is_not_empty(
    runtime: Runtime, broker: Captured, tmp_path: Path
) -> None:
    """A backlog is not a loss: an execution nobody claimed while messages still wait in
    the queue is most likely one of them; it is sent again once the queue is empty, or
    after QUEUED_PATIENCE recovery periods whatever the queue says."""
    run_id = runtime.orchestrator.submit("pay", {"ledger": str(tmp_path / "ledger.txt")})
    broker.take("charge")
    recovery_after = runtime.settings.recovery_after
    _stall(runtime, run_id, "charge", timedelta(seconds=2 * recovery_after))
    broker.queued = 250
    assert runtime.scheduler.recover() == 0
    assert _execution(runtime, run_id, "charge").recoveries == 0
    broker.queued = 0  # drained, and it never came: lost
    assert runtime.scheduler.recover() == 1
    broker.take("charge")
    broker.queued = 250
    _stall(runtime, run_id, "charge", timedelta(seconds=(QUEUED_PATIENCE + 1) * recovery_after))
    assert runtime.scheduler.recover() == 1  # waited too long for a queue to explain it
    broker.take("charge")


def test_on_resume_sends_a_recovered_run_to_its_replanning_node(
    runtime: Runtime, broker: Captured, tmp_path: Path
) -> None:
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("replanning", {"ledger": str(tmp_path / "ledger.txt")})
    assert runtime.runner.run(broker.take("plan").to_dict()) is Handled.COMMITTED
    broker.take("work")  # lost
    _stall(runtime, run_id, "work")
    runtime.scheduler.recover()
    resumed = broker.take("work")
    assert resumed.resumed
    assert runtime.runner.run(resumed.to_dict()) is Handled.COMMITTED  # the check said no
    view = orchestrator.get_run(run_id)
    assert view.state is not None
    work = view.state.nodes["work"]
    assert work.status is NodeStatus.CANCELLED and "stale" in (work.error or "")
    (invalidated,) = [e for e in orchestrator.events(run_id) if e["type"] == "plan_invalidated"]
    assert invalidated["data"]["node"] == "work"
    assert _execution(runtime, run_id, "work").status == "cancelled"

    runtime.runner.run(broker.take("replan").to_dict())
    runtime.runner.run(broker.take("work").to_dict())  # visit 2, not resumed: no check
    view = orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED
    assert [line.split()[1:3] for line in _ledger(tmp_path)] == [
        ["plan", "1"],
        ["replan", "1"],
        ["work", "2"],
    ]


# -- a redelivered message that races the sweep ------------------------------------------
# A worker dies holding `work`; a copy of its message that is not marked resumed (the relay
# sends it again when the dead worker's "sent" mark died with it) reaches another worker
# while the scheduler's sweep is part-way through recovering the same execution. Whichever
# point of the sweep it lands on, the node runs as resumed (the on_resume check sends the
# run to `replan`) and the death is counted once, by the sweep.


def _lost_mid_work(runtime: Runtime, broker: Captured, tmp_path: Path) -> tuple[str, NodeMessage]:
    """A replanning run whose `work` node's worker died holding the lease: the run, and the
    node's message as the broker delivers it again (not marked resumed)."""
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("replanning", {"ledger": str(tmp_path / "ledger.txt")})
    assert runtime.runner.run(broker.take("plan").to_dict()) is Handled.COMMITTED
    work = broker.take("work")
    doomed = runtime.leases.acquire(
        lease_key(run_id, "work", 1, "run"), 0.2, {"worker": "doomed", "attempt": 1}
    )
    assert doomed is not None
    time.sleep(0.3)  # it dies: the lease runs out unreleased
    return run_id, work


def _deliver_during(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, step: str, message: NodeMessage
) -> list[Handled]:
    """When the sweep comes to ``step`` (a method of its recovery), a worker takes
    ``message`` first; the rest of that step runs once the worker holds the lease, before
    its handler starts — as a scheduler on another host would, meanwhile."""
    recovery, runner = runtime.scheduler.recovery, runtime.runner
    rest = getattr(recovery, step)
    hold = runner.heartbeats.hold
    handled: list[Handled] = []
    swept: list[int] = []

    def worker_first(*args: Any, **kwargs: Any) -> int:
        def holding(*hold_args: Any, **hold_kwargs: Any) -> Any:
            beat = hold(*hold_args, **hold_kwargs)
            swept.append(rest(*args, **kwargs))
            return beat

        monkeypatch.setattr(runner.heartbeats, "hold", holding)
        handled.append(runner.run(message.to_dict()))
        monkeypatch.setattr(runner.heartbeats, "hold", hold)
        return swept[0] if swept else rest(*args, **kwargs)

    monkeypatch.setattr(recovery, step, worker_first)
    return handled


def _replanned_and_counted_once(
    runtime: Runtime, broker: Captured, run_id: str, tmp_path: Path
) -> None:
    """`work` ran as resumed: its on_resume check found the plan stale, so the handler did
    not run again and the run went to `replan`; the death was counted once."""
    orchestrator = runtime.orchestrator
    (invalidated,) = [e for e in orchestrator.events(run_id) if e["type"] == "plan_invalidated"]
    assert invalidated["data"]["node"] == "work"
    assert [line.split()[1:3] for line in _ledger(tmp_path)] == [["plan", "1"]]
    recovered = [e for e in orchestrator.events(run_id) if e["type"] == "audit.recovered"]
    assert [e["data"]["recoveries"] for e in recovered] == [1]
    assert _execution(runtime, run_id, "work").recoveries == 1
    again = broker.take("work")  # the sweep's own message: the lease or the result turns it away
    assert again.resumed
    assert runtime.runner.run(again.to_dict()) is Handled.ALREADY_DONE
    assert runtime.runner.run(broker.take("replan").to_dict()) is Handled.COMMITTED


def test_a_node_claimed_after_the_sweep_took_its_lapsed_claim_runs_resumed(
    runtime: Runtime, broker: Captured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep has taken the lapsed claim (and the dead holder's heartbeat record with
    it) but not yet counted the recovery when the copy is claimed."""
    run_id, work = _lost_mid_work(runtime, broker, tmp_path)
    handled = _deliver_during(runtime, monkeypatch, "_recover_lapsed", work)
    assert runtime.scheduler.recover() == 1
    assert handled == [Handled.COMMITTED]
    _replanned_and_counted_once(runtime, broker, run_id, tmp_path)


def test_a_node_claimed_after_the_older_sweep_forgot_its_record_runs_resumed(
    runtime: Runtime, broker: Captured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older sweep (dispatched long ago, no live lease) finds the execution first — its
    lease ran out just after the sweep looked at the lapsed claims — and has dropped the
    dead holder's record but not yet counted the recovery when the copy is claimed."""
    run_id, work = _lost_mid_work(runtime, broker, tmp_path)
    monkeypatch.setattr(runtime.leases, "lapsed", lambda limit: [])
    _stall(runtime, run_id, "work")
    handled = _deliver_during(runtime, monkeypatch, "_recover_one", work)
    assert runtime.scheduler.recover() == 1
    assert handled == [Handled.COMMITTED]
    _replanned_and_counted_once(runtime, broker, run_id, tmp_path)


def test_a_node_read_before_the_sweep_and_claimed_after_it_runs_resumed(
    runtime: Runtime, broker: Captured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker read the execution (no recovery counted yet), then the whole sweep ran
    — taken, counted, sent again, settled — before its claim: nothing is left in Redis to
    say the claim lapsed, but PostgreSQL has the count by the time the claim is written."""
    run_id, work = _lost_mid_work(runtime, broker, tmp_path)
    runner = runtime.runner
    acquire = runner._acquire

    def after_the_sweep(message: NodeMessage, fence_floor: int) -> Any:
        assert runtime.scheduler.recover() == 1
        return acquire(message, fence_floor)

    monkeypatch.setattr(runner, "_acquire", after_the_sweep)
    assert runner.run(work.to_dict()) is Handled.COMMITTED
    monkeypatch.setattr(runner, "_acquire", acquire)
    _replanned_and_counted_once(runtime, broker, run_id, tmp_path)


def test_a_held_node_is_released_by_cancel(runtime: Runtime, broker: Captured) -> None:
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("pay", {})
    charge = broker.take("charge")
    _claim_and_die(runtime, charge)
    _stall(runtime, run_id, "charge")
    runtime.scheduler.recover()
    cancel = CancelRequested(at=0.0, reason="customer gave up", actor="alice")
    orchestrator.apply(run_id, partial(stamped, cancel))
    assert orchestrator.get_run(run_id).status is RunStatus.CANCELLED
    assert _execution(runtime, run_id, "charge").status == "cancelled"
    assert runtime.runner.run(charge.to_dict()) is Handled.ALREADY_DONE


# -- with real processes: kill -9 --------------------------------------------------------


def _held(cluster: Cluster, run_id: str) -> bool:
    view = cluster.client.get_run(run_id)
    return view.state is not None and bool(view.state.held)


def test_kill_9_mid_irreversible_node_holds_until_the_operator_decides(cluster: Cluster) -> None:
    worker = cluster.worker(concurrency=2)
    cluster.scheduler()
    vouched = cluster.submit("pay", {"slow": {"charge": 30}})
    retried = cluster.submit("pay", {"slow": {"charge": 30}})
    for run_id in (vouched, retried):
        cluster.wait_for(
            lambda run_id=run_id: cluster.executions()[(run_id, "charge", 1)] == 1,
            30,
            "charge to start",
        )
    cluster.kill(worker)  # both charges were mid-call: did the card get charged?
    cluster.worker(concurrency=2)
    for run_id in (vouched, retried):
        cluster.wait_for(lambda run_id=run_id: _held(cluster, run_id), 30, "the hold")
        assert cluster.client.get_run(run_id).status is RunStatus.WAITING
    assert cluster.client.signal(vouched, "recovery.complete", {"output": {"charge_id": "ch_1"}})
    assert cluster.client.signal(retried, "recovery.retry")
    for run_id in (vouched, retried):
        assert cluster.wait(run_id, timeout_s=30).status is RunStatus.SUCCEEDED
    counts = cluster.executions()
    assert counts[(vouched, "charge", 1)] == 1  # never ran again without a person's word
    assert counts[(retried, "charge", 1)] == 2  # ran again because the operator said so
    assert counts[(vouched, "ship", 1)] == counts[(retried, "ship", 1)] == 1


def test_a_crash_looping_node_waits_for_an_operator_with_on_max_recoveries_hold(
    cluster: Cluster,
) -> None:
    settings = {"CAIRN_MAX_RECOVERIES": "2", "CAIRN_ON_MAX_RECOVERIES": "hold"}
    cluster.worker(concurrency=1, **settings)
    cluster.scheduler(**settings)
    run_id = cluster.submit("poison")
    cluster.wait_for(lambda: _held(cluster, run_id), 60, "the hold")
    assert cluster.executions()[(run_id, "die", 1)] == 2
    view = cluster.client.get_run(run_id)
    assert view.state is not None
    assert "died while running it 2 times" in (view.state.held[0][0].error or "")
    cluster.client.signal(run_id, "recovery.fail", {"reason": "bug #1234"})
    view = cluster.wait(run_id, timeout_s=10)
    assert view.status is RunStatus.FAILED and "bug #1234" in (view.reason or "")
    assert cluster.executions()[(run_id, "die", 1)] == 2


def test_kill_9_then_on_resume_replans_the_run(cluster: Cluster) -> None:
    worker = cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("replanning", {"slow": {"work": 30}})
    cluster.wait_for(lambda: cluster.executions()[(run_id, "work", 1)] == 1, 30, "work to start")
    cluster.kill(worker)
    cluster.worker()
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert (counts[(run_id, "work", 1)], counts[(run_id, "replan", 1)]) == (1, 1)
    assert counts[(run_id, "work", 2)] == 1
    assert any(e["type"] == "plan_invalidated" for e in cluster.client.events(run_id))


def test_an_irreversible_claim_waiting_out_a_database_outage_keeps_its_lease(
    database_url: str, redis_urls: tuple[str, str], tmp_path: Path, monkeypatch: Any
) -> None:
    """The claim an irreversible node records before it runs meets PostgreSQL restarting
    for twice the lease's life: the heartbeat renews the lease from its acquire on, so
    the node runs and commits when the database is back — not lost to a lease that
    lapsed while the worker waited."""
    built = _built(
        tmp_path,
        database_url=database_url,
        redis_url=redis_urls[1],
        lease_ttl=1,
        heartbeat_interval=0.25,
    )
    try:
        broker = built.orchestrator.publisher
        assert isinstance(broker, Captured)
        run_id = built.orchestrator.submit("pay", {"ledger": str(tmp_path / "ledger.txt")})
        charge = broker.take("charge")
        executions_ = built.runner.executions
        claim, back_at = executions_.claim, time.monotonic() + 2.0

        def restarting(*args: Any, **kwargs: Any) -> Any:
            if time.monotonic() < back_at:
                raise psycopg.OperationalError("the database system is starting up")
            return claim(*args, **kwargs)

        monkeypatch.setattr(executions_, "claim", restarting)
        assert built.runner.run(charge.to_dict()) is Handled.COMMITTED
        assert time.monotonic() >= back_at  # it waited the outage out
        assert [line.split()[1] for line in _ledger(tmp_path)] == ["charge"]
        ship = broker.take("ship")
        assert built.runner.run(ship.to_dict()) is Handled.COMMITTED
        assert built.orchestrator.get_run(run_id).status is RunStatus.SUCCEEDED
    finally:
        built.close()
