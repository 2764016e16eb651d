"""The rate buckets contract on both backends: Redis (the fleet's) and memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cairn.engine.rates import Rates
from cairn.lease.rates import MemoryRates, RedisRates
from cairn.testing.rates_contract import RatesContract
from tests.contract.conftest import unavailable


class TestMemoryRates(RatesContract):
    @pytest.fixture
    def rates(self) -> Rates:
        return MemoryRates()


class TestRedisRates(RatesContract):
    @pytest.fixture
    def rates(self, request: pytest.FixtureRequest) -> Iterator[Rates]:
        try:
            redis.Redis.from_url("redis://127.0.0.1:6379/0").ping()
        except redis.RedisError as error:
            unavailable("Redis", error)
        _broker, leases_url = request.getfixturevalue("redis_urls")
        client = redis.Redis.from_url(leases_url)
        yield RedisRates(client)
        client.close()
