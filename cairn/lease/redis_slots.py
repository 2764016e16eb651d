"""Concurrency slots in Redis (see :mod:`cairn.lease.slots`): a sorted set per pool,
its members the leases holding a slot, taken all or nothing by ``take_slots.lua``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources

import redis

from cairn.lease.slots import CONTENDED_KEY, SLOTS_PREFIX


def _script(name: str) -> str:
    """A slot script, with the function every one of them counts a pool by."""
    scripts = resources.files("cairn.lease").joinpath("scripts")
    return scripts.joinpath("slots_live.lua").read_text() + scripts.joinpath(name).read_text()


TAKE_SLOTS, COUNT_SLOTS = _script("take_slots.lua"), _script("count_slots.lua")
SETTLE = """
if redis.call('hget', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('hdel', KEYS[1], ARGV[1])
end
return 0
"""


class RedisSlots:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._take = client.register_script(TAKE_SLOTS)
        self._count = client.register_script(COUNT_SLOTS)
        self._settle = client.register_script(SETTLE)

    @classmethod
    def from_url(cls, url: str) -> RedisSlots:
        return cls(
            redis.Redis.from_url(
                url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30
            )
        )

    def take(self, pools: Sequence[tuple[str, int]], holder: str) -> str | None:
        if not pools:
            return None
        keys = [*(SLOTS_PREFIX + pool for pool, _limit in pools), CONTENDED_KEY]
        full = int(self._take(keys=keys, args=[holder, *(limit for _, limit in pools)]))
        if full < 0:  # the lease is no longer this holder's: a slot it could not keep
            return pools[0][0]
        return None if full == 0 else pools[full - 1][0]

    def give_back(self, pools: Sequence[str], holder: str) -> Mapping[str, int]:
        if not pools:
            return {}
        with self.client.pipeline(transaction=False) as pipe:
            for pool in pools:
                pipe.zrem(SLOTS_PREFIX + pool, holder)
            pipe.hmget(CONTENDED_KEY, [SLOTS_PREFIX + pool for pool in pools])
            *_removed, counters = pipe.execute()
        return {pool: int(c) for pool, c in zip(pools, counters, strict=True) if c is not None}

    def settle(self, pool: str, contention: int) -> None:
        self._settle(keys=[CONTENDED_KEY], args=[SLOTS_PREFIX + pool, contention])

    def holders(self, pools: Sequence[str]) -> Mapping[str, int]:
        if not pools:
            return {}
        counts = self._count(keys=[SLOTS_PREFIX + pool for pool in pools])
        return dict(zip(pools, (int(c) for c in counts), strict=True))

    def pools(self, limit: int = 1000) -> list[str]:
        found: set[str] = set()
        for key in self.client.scan_iter(match=SLOTS_PREFIX + "*", count=500):
            found.add(key.decode().removeprefix(SLOTS_PREFIX))
            if len(found) >= limit:
                break
        return sorted(found)
