"""Real services for the tests: PostgreSQL and Redis.

Each test gets its own database, cloned from a template migrated once per session, and
its own pair of Redis logical databases (broker, leases), claimed so that two test runs
side by side on the same services never share one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from cairn.store.database import make_engine, upgrade

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = os.environ.get("CAIRN_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("CAIRN_TEST_REDIS", "redis://127.0.0.1:6379")

redis_slots = itertools.count()


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_ADMIN, autocommit=True)


def db_url(name: str) -> str:
    base, _, _ = PG_ADMIN.rpartition("/")
    return f"{base}/{name}"


def drop(name: str) -> None:
    with admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    name = f"cairn_tmpl_{os.getpid()}"
    drop(name)
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    engine = make_engine(db_url(name))
    upgrade(engine)
    engine.dispose()
    yield name
    drop(name)


@pytest.fixture
def database_url(pg_template: str) -> Iterator[str]:
    name = f"cairn_t_{uuid.uuid4().hex[:12]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield db_url(name)
    drop(name)


SLOTS = 7  # pairs of logical databases: 2-3, 4-5, ..., 14-15
SLOT_CLAIM_S = 900  # a claim outlives any test; a crashed test's claim then lapses


@contextlib.contextmanager
def redis_pair() -> Iterator[tuple[str, str]]:
    """(broker, leases): a pair of logical databases no other test uses at the same time
    — in this process or in another test run on the same Redis (a claim in database 0,
    taken with SET NX), so that two test runs side by side never share a broker."""
    claims = redis.Redis.from_url(f"{REDIS}/0")
    owner = f"{os.getpid()}:{next(redis_slots)}"
    deadline = time.monotonic() + SLOT_CLAIM_S
    slot = None
    while slot is None:
        for candidate in range(1, SLOTS + 1):
            if claims.set(f"cairn-test-slot:{candidate}", owner, nx=True, ex=SLOT_CLAIM_S):
                slot = candidate
                break
        else:
            if time.monotonic() > deadline:
                raise RuntimeError("no free Redis test slot: are stale test runs alive?")
            time.sleep(0.2)
    urls = (f"{REDIS}/{2 * slot}", f"{REDIS}/{2 * slot + 1}")
    try:
        for url in urls:
            redis.Redis.from_url(url).flushdb()
        yield urls
        for url in urls:
            redis.Redis.from_url(url).flushdb()
    finally:
        key = f"cairn-test-slot:{slot}"
        if claims.get(key) == owner.encode():
            claims.delete(key)
        claims.close()


@pytest.fixture
def redis_urls() -> Iterator[tuple[str, str]]:
    """A Redis pair of the test's own (see :func:`redis_pair`)."""
    with redis_pair() as urls:
        yield urls
