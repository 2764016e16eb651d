"""The circuits contract on both backends: Redis (the fleet's) and memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cairn.engine.circuits import Circuits
from cairn.lease.circuits import MemoryCircuits, RedisCircuits
from cairn.testing.circuits_contract import CircuitsContract
from tests.contract.conftest import unavailable


class TestMemoryCircuits(CircuitsContract):
    @pytest.fixture
    def circuits(self) -> Circuits:
        return MemoryCircuits()


class TestRedisCircuits(CircuitsContract):
    @pytest.fixture
    def circuits(self, request: pytest.FixtureRequest) -> Iterator[Circuits]:
        try:
            redis.Redis.from_url("redis://127.0.0.1:6379/0").ping()
        except redis.RedisError as error:
            unavailable("Redis", error)
        _broker, leases_url = request.getfixturevalue("redis_urls")
        client = redis.Redis.from_url(leases_url)
        yield RedisCircuits(client)
        client.close()
