"""The circuits contract on both backends: Redis (the fleet's) and memory."""

from __future__ import annotations

import pytest
import redis

from cairn.limits.circuit_state import MemoryCircuits, RedisCircuits
from cairn.limits.circuits import Circuits
from cairn.testing.circuits_contract import CircuitsContract


class TestMemoryCircuits(CircuitsContract):
    @pytest.fixture
    def circuits(self) -> Circuits:
        return MemoryCircuits()


class TestRedisCircuits(CircuitsContract):
    @pytest.fixture
    def circuits(self, leases_redis: redis.Redis) -> Circuits:
        return RedisCircuits(leases_redis)
