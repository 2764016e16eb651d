"""persist: how a task's result is kept — the definition's checks, the cache keys, and
the in-process cache of the embedded default."""

from __future__ import annotations

import time
from datetime import timedelta

from cairn import Workflow, load_definition
from cairn.orchestrator.definition import Persist, PersistKind, TaskNode
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
    cache = MemoryResultCache()
    cache.put("k", {"x": 1}, ttl_s=0.05)
    assert cache.get("k") == {"x": 1}
    time.sleep(0.06)
    assert cache.get("k") is None
    cache.put("k", {"x": 2}, ttl_s=60)
    cache.delete("k")
    assert cache.get("k") is None
