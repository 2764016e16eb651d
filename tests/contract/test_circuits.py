"""The circuits contract on both backends: Redis (the fleet's) and memory."""

from __future__ import annotations

import pytest
import redis

from cairn.engine.circuits import Circuits
from cairn.lease.circuits import MemoryCircuits, RedisCircuits
from cairn.testing.circuits_contract import CircuitsContract


class TestMemoryCircuits(CircuitsContract):
    @pytest.fixture
    def circuits(self) -> Circuits:
        return MemoryCircuits()


class TestRedisCircuits(CircuitsContract):
    @pytest.fixture
    def circuits(self, leases_redis: redis.Redis) -> Circuits:
        return RedisCircuits(leases_redis)
