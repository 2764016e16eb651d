"""The lease contract on both backends: Redis (the fleet's) and memory (the embedded
default's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cairn.lease.memory import MemoryLeases
from cairn.lease.port import Leases
from cairn.lease.redis import RedisLeases
from cairn.testing.contracts import LeasesContract
from tests.contract.conftest import unavailable


class TestMemoryLeases(LeasesContract):
    @pytest.fixture
    def leases(self) -> Leases:
        return MemoryLeases()


class TestRedisLeases(LeasesContract):
    @pytest.fixture
    def leases(self, request: pytest.FixtureRequest) -> Iterator[Leases]:
        try:
            redis.Redis.from_url("redis://127.0.0.1:6379/0").ping()
        except redis.RedisError as error:
            unavailable("Redis", error)
        _broker, leases_url = request.getfixturevalue("redis_urls")
        client = redis.Redis.from_url(leases_url)
        yield RedisLeases(client)
        client.close()
