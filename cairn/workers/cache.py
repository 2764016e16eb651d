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
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import redis

from cairn.model.definition import Persist

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
    """The embedded default's cache: this process only."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= time.monotonic():
                self._entries.pop(key, None)
                return None
            return json.loads(entry[1])  # type: ignore[no-any-return]

    def put(self, key: str, result: Mapping[str, Any], ttl_s: float) -> None:
        with self._lock:
            self._entries[key] = (time.monotonic() + ttl_s, json.dumps(result))

    def delete(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)
