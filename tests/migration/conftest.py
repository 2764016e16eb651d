"""Empty databases for the migration tests: a SQLite file and a PostgreSQL database of
the test's own, with nothing in them — not even the template the integration tests clone,
since that template is itself made by the migrations under test. PostgreSQL missing is
skipped on a laptop and fails in CI, as for the contract suites."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from cairn.store.database import make_engine
from tests.contract.conftest import unavailable
from tests.support.services import PG_ADMIN, admin, db_url, drop


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped after the test."""
    try:
        psycopg.connect(PG_ADMIN, connect_timeout=3).close()
    except psycopg.OperationalError as error:
        unavailable("PostgreSQL", error)
    name = f"cairn_empty_{uuid.uuid4().hex[:12]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield db_url(name)
    finally:
        drop(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on an empty database of each backend the migrations must create."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'cairn.db'}"
    else:
        url = request.getfixturevalue("empty_postgres")
    engine = make_engine(url)
    yield engine
    engine.dispose()
