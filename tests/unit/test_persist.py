"""persist: how a task's result is kept — the definition's checks, the cache keys, and
the in-process cache of the embedded default."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cairn import PermanentError, Workflow, load_definition
from cairn.decider.fusion import fused_next
from cairn.decider.graph import decide
from cairn.effects import EffectLedger
from cairn.model.definition import Persist, PersistKind, TaskNode, WorkflowDefinition
from cairn.model.events import NodeFailed, NodeSucceeded, RunStarted
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus
from cairn.testing.clock import FakeClock
from cairn.workers.cache import MemoryResultCache, cache_key
from tests.unit.test_loader import faults_of, pairs

NOOP = "tests.unit.handlers:noop"


def report(**parts: object) -> Workflow:
    wf = Workflow("report", version=1)
    wf.task("part", NOOP, next="final", **parts)
    wf.task("final", NOOP, next="done", invalidates=["part"])
    return wf.end("done")


def test_the_forms_of_persist() -> None:
    short = report(persist="cached(10m)").build().nodes["part"]
    long = report(persist={"cached": "1h", "key": ["week"]}).build().nodes["part"]
    assert isinstance(short, TaskNode) and isinstance(long, TaskNode)
    assert short.persist == Persist(PersistKind.CACHED, timedelta(minutes=10))
    assert long.persist == Persist(PersistKind.CACHED, timedelta(hours=1), ("week",))
    spec = report(persist="durable").to_spec()
    del spec["nodes"]["final"]["invalidates"]
    durable = load_definition(spec).nodes["part"]
    assert isinstance(durable, TaskNode) and durable.persist.kind is PersistKind.DURABLE


def test_what_cannot_be_cached_is_refused() -> None:
    spec = report(persist={"cached": "10m"}, irreversible=True).to_spec()
    assert pairs(faults_of(spec)) == {("bad_persist", "part")}
    spec = report(persist="cached(soon)").to_spec()
    assert pairs(faults_of(spec)) == {("bad_duration", "part"), ("bad_persist", "final")}
    spec = report(persist={"cached": "10m", "key": "week"}).to_spec()
    assert pairs(faults_of(spec)) == {("bad_value", "part")}
    spec = report(persist="forever").to_spec()  # and final invalidates a durable node
    assert pairs(faults_of(spec)) == {("bad_value", "part"), ("bad_persist", "final")}


def test_cache_keys_depend_on_the_key_fields_only() -> None:
    persist = Persist(PersistKind.CACHED, timedelta(minutes=1), ("week",))
    one = cache_key("default", "report", "part", persist, {"week": "W1", "noise": 1})
    assert one == cache_key("default", "report", "part", persist, {"week": "W1", "noise": 2})
    assert one != cache_key("default", "report", "part", persist, {"week": "W2"})
    assert one != cache_key("tenant-b", "report", "part", persist, {"week": "W1"})
    everything = Persist(PersistKind.CACHED, timedelta(minutes=1))
    assert cache_key("d", "r", "p", everything, {"a": 1}) != cache_key(
        "d", "r", "p", everything, {"a": 1, "b": 2}
    )


def test_the_memory_cache_expires_entries() -> None:
    clock = FakeClock()
    cache = MemoryResultCache(clock=clock)
    cache.put("k", {"x": 1}, ttl_s=0.05)
    assert cache.get("k") == {"x": 1}
    clock.advance(0.06)
    assert cache.get("k") is None
    cache.put("k", {"x": 2}, ttl_s=60)
    cache.delete("k")
    assert cache.get("k") is None


# -- ephemeral ----------------------------------------------------------------------------


def lookup(**after: object) -> Workflow:
    wf = Workflow("lookup", version=1)
    wf.task("fetch", NOOP, next="then", persist="ephemeral")
    wf.task("then", NOOP, next="done", **after)
    return wf.end("done")


def fetched(definition: WorkflowDefinition) -> tuple[RunState, NodeOutcome]:
    state = decide(definition, RunState("r", "lookup", 1), RunStarted(at=1.0)).state
    event = NodeSucceeded(at=0.0, node="fetch", output={"x": 1})
    return state, NodeOutcome(event, NodeStatus.SUCCEEDED, result={"x": 1})


MESSAGE = NodeMessage("r", "lookup", 1, "fetch", 1, 1)


def test_an_ephemeral_node_runs_on_into_a_plain_task() -> None:
    definition = lookup().build()
    state, outcome = fetched(definition)
    following = fused_next(definition, state, MESSAGE, outcome, now=2.0)
    assert following is not None
    after, message = following
    assert (message.node, message.iteration, message.attempt) == ("then", 1, 1)
    assert after.vars == {"x": 1} and after.nodes["fetch"].status is NodeStatus.SUCCEEDED


def test_it_does_not_run_on_when_the_decision_is_more_than_a_dispatch() -> None:
    for after in ({"timeout": "5m"}, {"irreversible": True}):  # a shorter timeout; a claim
        definition = lookup(**after).build()
        state, outcome = fetched(definition)
        assert fused_next(definition, state, MESSAGE, outcome, now=2.0) is None
    durable = Workflow("lookup", version=1)
    durable.task("fetch", NOOP, next="then").task("then", NOOP, next="done").end("done")
    definition = durable.build()
    state, outcome = fetched(definition)
    assert fused_next(definition, state, MESSAGE, outcome, now=2.0) is None  # not ephemeral
    failed = NodeOutcome(NodeFailed(at=0.0, node="fetch"), NodeStatus.FAILED)
    assert fused_next(lookup().build(), state, MESSAGE, failed, now=2.0) is None


def test_node_timeouts_run_on_under_the_timer_the_chain_began_with() -> None:
    """Every task running a handler has a timeout by default: the chain runs under the
    first node's timer, so it runs on into a node whose own timeout is no shorter, and
    never puts a timer over a node that has none (or leaves one without)."""
    for after, runs_on in (
        ({}, True),  # both have the default 1 h
        ({"timeout": "2h"}, True),
        ({"timeout": "5m"}, False),
        ({"timeout": "none"}, False),
    ):
        definition = lookup(**after).build()
        state, outcome = fetched(definition)
        found = fused_next(definition, state, MESSAGE, outcome, now=2.0)
        assert (found is not None) is runs_on, after
    unbounded = Workflow("lookup", version=1, node_timeout="none")
    unbounded.task("fetch", NOOP, next="then", persist="ephemeral")
    definition = unbounded.task("then", NOOP, next="done").end("done").build()
    state, outcome = fetched(definition)
    assert fused_next(definition, state, MESSAGE, outcome, now=2.0) is not None
    spec = lookup().to_spec()
    spec["nodes"]["fetch"]["timeout"] = "none"  # no timer would bound the node after it
    definition = load_definition(spec)
    state, outcome = fetched(definition)
    assert fused_next(definition, state, MESSAGE, outcome, now=2.0) is None


def test_an_ephemeral_node_cannot_have_effects() -> None:
    spec = lookup().to_spec()
    spec["nodes"]["fetch"]["compensate"] = NOOP
    assert pairs(faults_of(spec)) == {("bad_persist", "fetch")}
    refused = EffectLedger(
        store=None,  # type: ignore[arg-type]  # never reached: refused first
        namespace="default",
        run_id="r",
        node="fetch",
        iteration=1,
        attempt=1,
        fence=1,
        max_payload_bytes=1000,
        refusal="fetch is ephemeral",
    )
    with pytest.raises(PermanentError, match="ephemeral"):
        refused.effect("shop.charge", "k", lambda key: None)
