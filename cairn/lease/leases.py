"""Leases: who may work on a node execution right now.

A lease is ``SET key token NX PX ttl`` with a random token per claim. Renewal and
release are Lua scripts that act only while the stored token is still the caller's, so
a worker that lost its lease (it expired during a GC pause or a SIGSTOP, and someone
else claimed the node) can never extend or delete the new holder's lease. Expiry is
judged by Redis's clock alone. Redis is the first gate; PostgreSQL's conditional result
commit is the final arbiter, so losing every lease never lets a result commit twice.

:class:`MemoryLeases` is the in-process twin for the embedded default and unit tests.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis

RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class Lease:
    key: str
    token: str
    ttl_s: float


class Leases(Protocol):
    def acquire(self, key: str, ttl_s: float) -> Lease | None: ...

    def renew(self, lease: Lease) -> bool: ...

    def release(self, lease: Lease) -> bool: ...

    def held(self, key: str) -> bool: ...


def lease_key(run_id: str, node: str, iteration: int, phase: str) -> str:
    return f"cairn:lease:{run_id}:{node}:{iteration}:{phase}"


class RedisLeases:
    def __init__(self, client: redis.Redis[bytes]) -> None:
        self.client = client
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)

    @classmethod
    def from_url(cls, url: str) -> RedisLeases:
        return cls(
            redis.Redis.from_url(
                url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30
            )
        )

    def acquire(self, key: str, ttl_s: float) -> Lease | None:
        token = secrets.token_hex(16)
        if self.client.set(key, token, nx=True, px=_ms(ttl_s)):
            return Lease(key, token, ttl_s)
        return None

    def renew(self, lease: Lease) -> bool:
        return bool(self._renew(keys=[lease.key], args=[lease.token, _ms(lease.ttl_s)]))

    def release(self, lease: Lease) -> bool:
        return bool(self._release(keys=[lease.key], args=[lease.token]))

    def held(self, key: str) -> bool:
        return bool(self.client.exists(key))


class MemoryLeases:
    """Leases in this process's memory, with the same semantics (a monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._leases: dict[str, tuple[str, float]] = {}

    def _live(self, key: str) -> tuple[str, float] | None:
        entry = self._leases.get(key)
        if entry is not None and entry[1] <= self._clock():
            del self._leases[key]
            return None
        return entry

    def acquire(self, key: str, ttl_s: float) -> Lease | None:
        with self._lock:
            if self._live(key) is not None:
                return None
            token = secrets.token_hex(16)
            self._leases[key] = (token, self._clock() + ttl_s)
            return Lease(key, token, ttl_s)

    def renew(self, lease: Lease) -> bool:
        with self._lock:
            entry = self._live(lease.key)
            if entry is None or entry[0] != lease.token:
                return False
            self._leases[lease.key] = (lease.token, self._clock() + lease.ttl_s)
            return True

    def release(self, lease: Lease) -> bool:
        with self._lock:
            entry = self._live(lease.key)
            if entry is None or entry[0] != lease.token:
                return False
            del self._leases[lease.key]
            return True

    def held(self, key: str) -> bool:
        with self._lock:
            return self._live(key) is not None


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
