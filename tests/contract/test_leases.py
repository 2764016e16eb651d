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
