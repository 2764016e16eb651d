"""Keyed concurrency limits: pools named by namespace and key value, the faults of a
malformed limit, and the parked executions woken in order — a slot nobody found full
given back without a write. (On the embedded runtime's worker threads:
tests/embedded/test_concurrency_limits.py; on real services, with workers killed:
tests/acceptance/test_concurrency_limits.py.)"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from cairn.definitions.loader import load_definition
from cairn.engine.slots import SlotGate
from cairn.errors import WorkflowDefinitionError
from cairn.lease.memory import MemoryLeases
from cairn.lease.slots import MemorySlots
from cairn.limits.concurrency import pools_for
from cairn.model.definition import ConcurrencyLimit, TaskNode
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.store.sql import Store
from cairn.testing.store_rows import started

_lock = threading.Lock()
_running: Counter[str] = Counter()
_most: Counter[str] = Counter()


def call_provider(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    tenant = str(state["tenant"])
    with _lock:
        _running[tenant] += 1
        _running["all"] += 1
        _most[tenant] = max(_most[tenant], _running[tenant])
        _most["all"] = max(_most["all"], _running["all"])
    time.sleep(0.05)
    with _lock:
        _running[tenant] -= 1
        _running["all"] -= 1
    return {"done": True}


def test_pools_are_named_by_namespace_and_key_value() -> None:
    definition = load_definition(
        {
            "name": "w",
            "version": 1,
            "start": "a",
            "concurrency": [{"key": "openai", "limit": 5}],
            "nodes": {
                "a": {
                    "handler": f"{__name__}:call_provider",
                    "concurrency": [{"key": "input.customer.id", "limit": 1}],
                    "next": "b",
                },
                "b": {"end": "succeeded"},
            },
        }
    )
    node = definition.nodes["a"]
    assert isinstance(node, TaskNode)
    assert node.concurrency == (ConcurrencyLimit("input.customer.id", 1),)
    pools = pools_for(
        definition,
        node,
        namespace="acme",
        state={},
        run_input={"customer": {"id": 42}},
        namespace_limit=100,
    )
    assert pools == [("acme/*", 100), ("acme/input.customer.id=42", 1), ("acme/openai", 5)]
    missing = pools_for(definition, node, namespace="acme", state={}, run_input={})
    assert ("acme/input.customer.id=null", 1) in missing
    # A run of acme's workflow shared with shop: the definition's limits are acme's (its
    # handlers call what acme's limits protect); the namespace's default is shop's own.
    shared = pools_for(
        definition,
        node,
        namespace="shop",
        state={},
        run_input={"customer": {"id": 42}},
        namespace_limit=100,
        owner="acme",
    )
    assert shared == [("acme/input.customer.id=42", 1), ("acme/openai", 5), ("shop/*", 100)]


@pytest.mark.parametrize(
    ("concurrency", "says"),
    [
        ({"key": "state.tenant"}, "needs a limit"),
        ({"key": "state.tenant", "limit": 0}, "positive integer"),
        ({"key": "open ai", "limit": 2}, "constant is up to 100"),
        ({"key": "state.", "limit": 2}, "not a path"),
        ({"key": "state.a b", "limit": 2}, "not a path"),
        ({"kee": "x", "limit": 2}, "did you mean 'key'"),
        ([{"key": "x", "limit": 1}, {"key": "x", "limit": 2}], "twice"),
        ("x", "is {key: EXPRESSION"),
    ],
)
def test_a_malformed_limit_is_a_fault(concurrency: object, says: str) -> None:
    spec = {
        "name": "w",
        "version": 1,
        "start": "a",
        "nodes": {
            "a": {"handler": f"{__name__}:call_provider", "concurrency": concurrency, "next": "b"},
            "b": {"end": "succeeded"},
        },
    }
    with pytest.raises(WorkflowDefinitionError, match=says):
        load_definition(spec)


def test_a_woken_execution_goes_to_its_nodes_queue_in_priority_then_age_order(
    store: Store,
) -> None:
    """Parked with its message's queue, published again to it; the highest priority
    first, then the longest waiting; a woken one holds its place until it has its slot."""
    published: list[NodeMessage] = []

    class Broker:
        def publish(self, messages: Sequence[NodeMessage]) -> bool:
            published.extend(messages)
            return True

        def backlog(self, queue: str | None = None) -> int | None:
            return 0

    leases = MemoryLeases()
    gate = SlotGate(MemorySlots(leases), store, Broker(), grace_s=60)
    keys = [started(store)[1] for _ in range(3)]
    with store.transaction() as tx:
        for n, (key, priority) in enumerate(zip(keys, (0, 5, 0), strict=True)):
            tx.park(key, 1, namespace="ns", pool="ns/gpu-box", limit=1, priority=priority,
                    queue="gpu" if n != 2 else None)  # fmt: skip
    assert gate.wake([("ns/gpu-box", 1)]) == 1
    assert [(m.run_id, m.queue, m.woken) for m in published] == [(keys[1].run_id, "gpu", True)]
    assert gate.wake([("ns/gpu-box", 1)]) == 0  # the woken one is on its way: it holds the slot
    with store.transaction() as tx:
        assert tx.unpark(keys[1])  # it took its slot
    assert gate.wake([("ns/gpu-box", 2)]) == 2
    assert [m.run_id for m in published[1:]] == [keys[0].run_id, keys[2].run_id]
    assert published[2].queue is None


def test_a_slot_of_a_pool_nobody_found_full_is_given_back_without_a_database_write(
    store: Store,
) -> None:
    """Leaving an uncontended pool costs no transaction; once a taker found it full and
    parked, leaving wakes that waiter; with nobody left waiting it is quiet again."""
    published: list[NodeMessage] = []

    class Broker:
        def publish(self, messages: Sequence[NodeMessage]) -> bool:
            published.extend(messages)
            return True

        def backlog(self, queue: str | None = None) -> int | None:
            return 0

    class CountingStore:
        def __init__(self) -> None:
            self.transactions = 0

        def transaction(self) -> Any:
            self.transactions += 1
            return store.transaction()

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

    leases = MemoryLeases()
    counted = CountingStore()
    gate = SlotGate(MemorySlots(leases), counted, Broker(), grace_s=60)  # type: ignore[arg-type]
    pools = [("ns/quiet", 1)]

    def holder(n: int) -> str:
        held = leases.acquire(f"lease-{n}", 30)
        assert held is not None
        return f"{held.key}|{held.token}"

    def message() -> NodeMessage:
        key = started(store)[1]
        return NodeMessage(key.run_id, "wf", 1, key.node, key.iteration, 1, Phase.RUN)

    first, second = holder(1), holder(2)
    running, waiting = message(), message()
    assert gate.enter(running, pools, first, "ns")
    gate.leave(pools, first)
    assert counted.transactions == 0
    assert gate.enter(running, pools, first, "ns")
    assert not gate.enter(waiting, pools, second, "ns")  # full: parked
    gate.leave(pools, first)
    assert [(m.run_id, m.woken) for m in published] == [(waiting.run_id, True)]
    assert gate.enter(replace(waiting, woken=True), pools, second, "ns")  # its wait is over
    gate.leave(pools, second)  # nobody waits any more: settled
    before = counted.transactions
    assert gate.enter(running, pools, first, "ns")
    gate.leave(pools, first)
    assert counted.transactions == before


def test_a_parked_execution_waits_with_its_runs_priority_and_is_woken_before_lower_ones(
    store: Store,
) -> None:
    """The worker parks an execution with its run's priority: when a slot frees, the
    higher one is woken though it came later, and its message keeps priority and
    namespace (the broker bands it is published in)."""
    published: list[NodeMessage] = []

    class Broker:
        def publish(self, messages: Sequence[NodeMessage]) -> bool:
            published.extend(messages)
            return True

        def backlog(self, queue: str | None = None) -> int | None:
            return 0

    leases = MemoryLeases()
    gate = SlotGate(MemorySlots(leases), store, Broker(), grace_s=60)
    pools = [("acme/box", 1)]

    def holder(n: int) -> str:
        held = leases.acquire(f"lease-{n}", 30)
        assert held is not None
        return f"{held.key}|{held.token}"

    def message() -> NodeMessage:
        key = started(store)[1]
        return NodeMessage(key.run_id, "wf", 1, key.node, key.iteration, 1, Phase.RUN)

    holders = [holder(n) for n in range(4)]
    running, low, high, default = message(), message(), message(), message()
    assert gate.enter(running, pools, holders[0], "acme")
    assert not gate.enter(low, pools, holders[1], "acme", -3)
    assert not gate.enter(default, pools, holders[3], "acme")
    assert not gate.enter(high, pools, holders[2], "acme", 4)  # the last to come
    gate.leave(pools, holders[0])
    assert [(m.run_id, m.priority, m.namespace) for m in published] == [(high.run_id, 4, "acme")]
    assert gate.enter(replace(high, woken=True), pools, holders[2], "acme", 4)
    gate.leave(pools, holders[2])
    assert [m.run_id for m in published[1:]] == [default.run_id]
