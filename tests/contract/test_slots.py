"""The slots contract on both backends: Redis (the fleet's) and memory."""

from __future__ import annotations

import pytest
import redis

from cairn.lease.memory import MemoryLeases
from cairn.lease.port import Leases
from cairn.lease.redis import RedisLeases
from cairn.lease.redis_slots import RedisSlots
from cairn.lease.slots import MemorySlots
from cairn.limits.concurrency import Slots
from cairn.testing.slots_contract import SlotsContract


class TestMemorySlots(SlotsContract):
    @pytest.fixture
    def pair(self) -> tuple[Leases, Slots]:
        leases = MemoryLeases()
        return leases, MemorySlots(leases)


class TestRedisSlots(SlotsContract):
    @pytest.fixture
    def pair(self, leases_redis: redis.Redis) -> tuple[Leases, Slots]:
        return RedisLeases(leases_redis), RedisSlots(leases_redis)
