"""The store contract on both databases: SQLite (the embedded default's) and PostgreSQL
(the fleet's, through its one-statement hot path)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.sql import Store
from cairn.testing.store_contract import StoreContract
from tests.contract.conftest import unavailable
from tests.support.services import PG_ADMIN


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        engine = make_engine(f"sqlite:///{tmp_path / 'cairn.db'}")
        upgrade(engine)
        yield store_for(engine)
        engine.dispose()


class TestPostgresStore(StoreContract):
    reads_moved_run = True

    @pytest.fixture
    def store(self, request: pytest.FixtureRequest) -> Iterator[Store]:
        try:
            psycopg.connect(PG_ADMIN, connect_timeout=3).close()
        except psycopg.OperationalError as error:
            unavailable("PostgreSQL", error)
        store = store_for(make_engine(request.getfixturevalue("database_url")))
        yield store
        store.dispose()
