"""The rate buckets contract on both backends: Redis (the fleet's) and memory."""

from __future__ import annotations

import pytest
import redis

from cairn.limits.rate_buckets import MemoryRates, RedisRates
from cairn.limits.rates import Rates
from cairn.testing.rates_contract import RatesContract


class TestMemoryRates(RatesContract):
    @pytest.fixture
    def rates(self) -> Rates:
        return MemoryRates()


class TestRedisRates(RatesContract):
    @pytest.fixture
    def rates(self, leases_redis: redis.Redis) -> Rates:
        return RedisRates(leases_redis)
