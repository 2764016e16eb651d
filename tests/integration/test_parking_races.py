"""A parked execution is on record before its worker lets its lease go: a wake or a stop
in between is not lost. A wake published meanwhile meets the lease and is dropped (the
node is held, by the worker that is parking it); a cancel committed before the waiter was
on record finds nobody to wake. Once its lease is gone, the worker looks again
(:meth:`cairn.engine.slots.SlotGate.parked`) and publishes it, so a cancelled run ends at
once — not at its cancel timeout — and a woken one does not wait out the grace."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from cairn.engine.slots import SlotGate
from cairn.lease.memory import MemoryLeases
from cairn.lease.slots import MemorySlots
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.model.statuses import RunStatus
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.schema import runs
from cairn.store.sql import Store
from cairn.testing.store_rows import started
from tests.support.one_slot import WORKFLOW, one_slot_runtime, release

POOLS = [("ns/one", 1)]


class Broker:
    def __init__(self) -> None:
        self.published: list[NodeMessage] = []

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        self.published.extend(messages)
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        return 0


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    engine = make_engine(database_url)
    upgrade(engine)
    yield store_for(engine)
    engine.dispose()


def parked_one(store: Store, gate: SlotGate, leases: MemoryLeases) -> NodeMessage:
    """One execution holding the pool's slot, and another parked behind it (returned)."""
    messages = []
    for n in range(2):
        key = started(store)[1]
        message = NodeMessage(key.run_id, "wf", 1, key.node, key.iteration, 1, Phase.RUN)
        held = leases.acquire(f"lease-{n}", 30)
        assert held is not None
        entered = gate.enter(message, POOLS, f"{held.key}|{held.token}", "ns")
        assert entered is (n == 0)
        messages.append(message)
    return messages[1]


def test_a_wait_untouched_meanwhile_waits_on(store: Store) -> None:
    broker, leases = Broker(), MemoryLeases()
    gate = SlotGate(MemorySlots(leases), store, broker, grace_s=60)
    waiting = parked_one(store, gate, leases)
    gate.parked(waiting.key)
    assert broker.published == []
    with store.reading() as tx:
        assert tx.parked(waiting.key)


def test_a_wake_that_met_the_parking_workers_lease_is_published_again(store: Store) -> None:
    broker, leases = Broker(), MemoryLeases()
    gate = SlotGate(MemorySlots(leases), store, broker, grace_s=60)
    waiting = parked_one(store, gate, leases)
    with store.transaction() as tx:
        assert tx.wake_executions([waiting.key])  # its message met the lease: dropped
    gate.parked(waiting.key)
    assert [(m.key, m.woken) for m in broker.published] == [(waiting.key, True)]


def test_a_stop_that_found_no_waiter_yet_is_published_once_it_is_on_record(
    store: Store,
) -> None:
    broker, leases = Broker(), MemoryLeases()
    gate = SlotGate(MemorySlots(leases), store, broker, grace_s=60)
    waiting = parked_one(store, gate, leases)
    with store.transaction() as tx:  # a cancel committed before the waiter's record
        tx.connection.execute(
            update(runs).where(runs.c.id == waiting.run_id).values(status="cancelling")
        )
    gate.parked(waiting.key)
    assert [(m.key, m.woken) for m in broker.published] == [(waiting.key, True)]


def test_a_run_cancelled_while_its_worker_parks_it_ends_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel commits while the worker that parks the node still holds its lease:
    the cancel's wake is dropped (held). The run ends within seconds all the same, not
    at its cancel timeout."""
    runtime = one_slot_runtime(tmp_path)
    orchestrator = runtime.orchestrator
    gate = runtime.runner.gate
    assert gate is not None
    cancelled: list[str] = []
    enter = gate.enter

    def cancelling_while_parking(message: NodeMessage, *args: Any, **kwargs: Any) -> bool:
        entered = enter(message, *args, **kwargs)
        if not entered and not cancelled:  # parked, its lease still held
            cancelled.append(message.run_id)
            orchestrator.cancel(message.run_id, "not needed any more")
            time.sleep(0.5)  # the cancel's wake meets this lease meanwhile
        return entered

    monkeypatch.setattr(gate, "enter", cancelling_while_parking)
    runtime.start_workers()
    try:
        holder = orchestrator.submit(WORKFLOW, {})
        deadline = time.monotonic() + 20
        while orchestrator.get_run(holder).status is not RunStatus.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)  # the holder has its slot
        waiter = orchestrator.submit(WORKFLOW, {})
        while not (view := orchestrator.get_run(waiter)).status.terminal:
            assert time.monotonic() < deadline, f"the cancelled waiter did not end: {view}"
            time.sleep(0.05)
        assert cancelled == [waiter]
        assert view.status is RunStatus.CANCELLED
        assert not orchestrator.get_run(holder).status.terminal  # the slot is still held
    finally:
        release.set()
        runtime.close()
