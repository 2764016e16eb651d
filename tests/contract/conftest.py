"""Backends for the contract suites: each port's every implementation. A backend whose
service is not running is skipped on a laptop; in CI (``CAIRN_TEST_REQUIRE_SERVICES=1``,
set by ``.ci/run``) it fails, so that a contract never silently stops running."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

pytest.register_assert_rewrite(
    "cairn.testing.contracts",
    "cairn.testing.store_contract",
    "cairn.testing.publisher_contract",
    "cairn.testing.definitions_contract",
)

REQUIRED = os.environ.get("CAIRN_TEST_REQUIRE_SERVICES") == "1"


def unavailable(what: str, error: Exception) -> None:
    if REQUIRED:
        raise RuntimeError(f"{what} is needed by the contract suite: {error}") from error
    pytest.skip(f"{what} is not running: {error}")


@pytest.fixture
def leases_redis(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A client of this test's own leases Redis db (the backends of leases, slots, rates
    and circuits keep their state there)."""
    try:
        redis.Redis.from_url("redis://127.0.0.1:6379/0").ping()
    except redis.RedisError as error:
        unavailable("Redis", error)
    _broker, leases_url = request.getfixturevalue("redis_urls")
    client = redis.Redis.from_url(leases_url)
    yield client
    client.close()
