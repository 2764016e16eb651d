"""The slots contract on both backends: Redis (the fleet's) and memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cairn.engine.slots import Slots
from cairn.lease.memory import MemoryLeases
from cairn.lease.port import Leases
from cairn.lease.redis import RedisLeases
from cairn.lease.redis_slots import RedisSlots
from cairn.lease.slots import MemorySlots
from cairn.testing.slots_contract import SlotsContract
from tests.contract.conftest import unavailable


class TestMemorySlots(SlotsContract):
    @pytest.fixture
    def pair(self) -> tuple[Leases, Slots]:
        leases = MemoryLeases()
        return leases, MemorySlots(leases)


class TestRedisSlots(SlotsContract):
    @pytest.fixture
    def pair(self, request: pytest.FixtureRequest) -> Iterator[tuple[Leases, Slots]]:
        try:
            redis.Redis.from_url("redis://127.0.0.1:6379/0").ping()
        except redis.RedisError as error:
            unavailable("Redis", error)
        _broker, leases_url = request.getfixturevalue("redis_urls")
        client = redis.Redis.from_url(leases_url)
        yield RedisLeases(client), RedisSlots(client)
        client.close()
