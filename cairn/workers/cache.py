"""Reusable results of ``persist: cached`` nodes, kept in Redis with a TTL.

A cached node's result is stored under (namespace, workflow, node, digest of its key
fields) when it succeeds, and a later execution of that node — in this run or another —
whose state has the same key values takes the result instead of running the handler.
The result still becomes the step's durable checkpoint like any other: the cache saves
the work, never the record. A node that ``invalidates`` cached nodes deletes their
entries (by the key values in its own state) once its result is committed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import redis

from cairn.model.definition import Persist, PersistKind, TaskNode, WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.statuses import NodeStatus

log = logging.getLogger(__name__)

PREFIX = "cairn:cache:"


def cache_key(
    namespace: str, workflow: str, node: str, persist: Persist, state: Mapping[str, Any]
) -> str:
    """The entry of ``node``'s result for ``state``: by its key fields' values (all of the
    state's fields, if it names none)."""
    fields = persist.key or tuple(sorted(state))
    values = {name: state.get(name) for name in fields}
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{PREFIX}{namespace}:{workflow}:{node}:{digest}"


class ResultCache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, result: Mapping[str, Any], ttl_s: float) -> None: ...

    def delete(self, *keys: str) -> None: ...


class RedisResultCache:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    @classmethod
    def from_url(cls, url: str) -> RedisResultCache:
        return cls(redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5))

    def get(self, key: str) -> dict[str, Any] | None:
        raw = self.client.get(key)
        return json.loads(raw) if raw is not None else None

    def put(self, key: str, result: Mapping[str, Any], ttl_s: float) -> None:
        self.client.set(key, json.dumps(result, separators=(",", ":")), px=int(ttl_s * 1000))

    def delete(self, *keys: str) -> None:
        if keys:
            self.client.delete(*keys)


class MemoryResultCache:
    """The embedded default's cache: this process only. ``clock``: monotonic seconds, for
    entries' expiry (a test passes :class:`~cairn.testing.clock.FakeClock`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= self._clock():
                self._entries.pop(key, None)
                return None
            return json.loads(entry[1])  # type: ignore[no-any-return]

    def put(self, key: str, result: Mapping[str, Any], ttl_s: float) -> None:
        with self._lock:
            self._entries[key] = (self._clock() + ttl_s, json.dumps(result))

    def delete(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)


def node_entry(
    namespace: str, definition: WorkflowDefinition, message: NodeMessage, state: Mapping[str, Any]
) -> str | None:
    """The cache entry a message's node reads and fills, if it is a cached node's run."""
    node = definition.nodes[message.node]
    if (
        message.phase is not Phase.RUN
        or not isinstance(node, TaskNode)
        or node.persist.kind is not PersistKind.CACHED
    ):
        return None
    return cache_key(namespace, definition.name, node.id, node.persist, state)


def keep(
    cache: ResultCache,
    definition: WorkflowDefinition,
    message: NodeMessage,
    entry: str,
    result: Mapping[str, Any],
) -> None:
    """Keep a cached node's result for its TTL; a cache that is down costs
    recomputation later, nothing else."""
    node = definition.nodes[message.node]
    assert isinstance(node, TaskNode) and node.persist.ttl is not None
    try:
        cache.put(entry, result, node.persist.ttl.total_seconds())
    except Exception:
        log.warning("could not cache the result of %s", message.key, exc_info=True)


def invalidate(
    cache: ResultCache,
    namespace: str,
    definition: WorkflowDefinition,
    state: Mapping[str, Any],
    steps: Sequence[tuple[NodeMessage, NodeOutcome]],
) -> None:
    """Committed: the cached results the succeeded nodes invalidate are deleted."""
    entries = []
    values = dict(state)
    for message, outcome in steps:
        values.update(outcome.result or {})
        node = definition.nodes[message.node]
        if outcome.status is not NodeStatus.SUCCEEDED or not isinstance(node, TaskNode):
            continue
        for target in node.invalidates:
            cached = definition.nodes[target]
            assert isinstance(cached, TaskNode)
            entries.append(cache_key(namespace, definition.name, target, cached.persist, values))
    if not entries:
        return
    try:
        cache.delete(*entries)
    except Exception:
        log.warning("could not invalidate cached results %s", entries, exc_info=True)
