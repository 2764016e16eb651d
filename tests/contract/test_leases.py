"""The lease contract on both backends: Redis (the fleet's) and memory (the embedded
default's)."""

from __future__ import annotations

import pytest
import redis

from cairn.lease.memory import MemoryLeases
from cairn.lease.port import Leases
from cairn.lease.redis import RedisLeases
from cairn.testing.contracts import LeasesContract


class TestMemoryLeases(LeasesContract):
    @pytest.fixture
    def leases(self) -> Leases:
        return MemoryLeases()


class TestRedisLeases(LeasesContract):
    @pytest.fixture
    def leases(self, leases_redis: redis.Redis) -> Leases:
        return RedisLeases(leases_redis)


def test_a_hand_on_after_the_scripts_were_flushed_loads_and_runs_its_script(
    leases_redis: redis.Redis,
) -> None:
    """A server restarted (or flushed) since the scripts were loaded: the hand-on's
    answer, read later, is the script run after loading it — it did not run before."""
    leases = RedisLeases(leases_redis)
    lease = leases.acquire("cairn:lease:a", 30, {"worker": "w"})
    assert lease is not None
    leases_redis.script_flush()
    nxt = leases.hand_on(lease, "cairn:lease:b", 30, record={"worker": "w"}).taken()
    assert nxt is not None and nxt.fence == 1
    assert not leases.held("cairn:lease:a") and leases.held("cairn:lease:b")
    assert leases.stats()["acquired"] == 2
