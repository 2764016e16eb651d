"""Concurrency slots (the port: :class:`cairn.limits.concurrency.Slots`): at most ``limit``
node executions at a time hold a slot of a pool (``<namespace>/<key>=<value>``, or
``<namespace>/<constant>``), fleet-wide.

A slot is held by a node lease: its holder is the lease's key and token, and it is live
exactly while that lease is — renewed by the lease's heartbeat, gone with a dead worker
within one lease TTL, fenced by the token (a holder whose lease was taken over holds no
slot). Counting a pool drops the members whose lease is gone, so a slot leaked by a
killed worker is never counted against the limit once its lease has expired. Taking
several pools is all or nothing.

Who waits for a slot is PostgreSQL's record (``slot_waits``), not Redis's: a waiting
execution holds no worker, no lease and no broker message (see
:mod:`cairn.engine.slots`).

:class:`RedisSlots` (``lease/scripts/take_slots.lua``) is the fleet's; :class:`MemorySlots`
the in-process twin over :class:`~cairn.lease.memory.MemoryLeases`. One contract suite
holds them together (:class:`cairn.testing.contracts.SlotsContract`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from cairn.lease.memory import MemoryLeases

SLOTS_PREFIX = "cairn:slots:"
# Each pool a taker found full, with a counter bumped at each such take; settling deletes
# it only if unchanged. Only giving back a slot of a pool listed here looks for waiters (a
# database transaction): an uncontended pool costs a step its two Redis calls, no more.
CONTENDED_KEY = "cairn:slots-contended"


class MemorySlots:
    """Slots in this process's memory, held by :class:`MemoryLeases` leases."""

    def __init__(self, leases: MemoryLeases) -> None:
        self._leases = leases
        self._lock = threading.Lock()
        self._pools: dict[str, set[str]] = {}
        self._contended: dict[str, int] = {}

    def _live(self, pool: str) -> set[str]:
        members = self._pools.setdefault(pool, set())
        for held in list(members):
            key, _, token = held.partition("|")
            if self._leases.token_of(key) != token:
                members.discard(held)
        return members

    def take(self, pools: Sequence[tuple[str, int]], holder: str) -> str | None:
        mine = holder
        key, _, token = holder.partition("|")
        with self._lock:
            if pools and self._leases.token_of(key) != token:
                first = pools[0][0]
                self._contended[first] = self._contended.get(first, 0) + 1
                return first
            for pool, limit in pools:
                live = self._live(pool)
                if mine not in live and len(live) >= limit:
                    self._contended[pool] = self._contended.get(pool, 0) + 1
                    return pool
            for pool, _limit in pools:
                self._pools[pool].add(mine)
        return None

    def give_back(self, pools: Sequence[str], holder: str) -> Mapping[str, int]:
        with self._lock:
            for pool in pools:
                self._pools.get(pool, set()).discard(holder)
            return {pool: self._contended[pool] for pool in pools if pool in self._contended}

    def settle(self, pool: str, contention: int) -> None:
        with self._lock:
            if self._contended.get(pool) == contention:
                del self._contended[pool]

    def holders(self, pools: Sequence[str]) -> Mapping[str, int]:
        with self._lock:
            return {pool: len(self._live(pool)) for pool in pools}

    def pools(self, limit: int = 1000) -> list[str]:
        with self._lock:
            return sorted(pool for pool, held in self._pools.items() if held)[:limit]
