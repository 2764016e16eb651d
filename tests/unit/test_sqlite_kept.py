"""On SQLite a thread keeps one connection for its steps' writes (cairn.store.sqlite
KeptConnections): the same one each time, dropped after a failure. With other threads —
never more than the limit, closed once its thread has ended, closed at dispose:
tests/embedded/test_sqlite_kept.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from cairn.store.database import make_engine
from cairn.store.sqlite import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    engine = make_engine(f"sqlite:///{tmp_path / 'kept.db'}")
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (n INTEGER)"))
    store = SqliteStore(engine)
    yield store
    store.dispose()


def _write(store: SqliteStore, n: int) -> Connection:
    with store.statements(writes=True) as tx:
        tx.connection.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})
        return tx.connection


def _count(store: SqliteStore) -> int:
    with store.reading() as tx:
        return int(tx.connection.execute(text("SELECT count(*) FROM t")).scalar_one())


def test_a_thread_writes_on_one_connection_it_keeps(store: SqliteStore) -> None:
    first, second = _write(store, 1), _write(store, 2)
    assert first is second and not first.closed
    assert _count(store) == 2  # each write committed
    with store.statements() as tx:  # reads take one from the pool
        assert tx.connection is not first


def test_a_failed_transaction_is_rolled_back_and_its_connection_dropped(
    store: SqliteStore,
) -> None:
    before = _write(store, 1)

    def failing() -> None:
        with store.statements(writes=True) as tx:
            tx.connection.execute(text("INSERT INTO t VALUES (2)"))
            raise RuntimeError("the step failed")

    with pytest.raises(RuntimeError):
        failing()
    assert before.closed
    assert _count(store) == 1  # nothing of the failed one
    after = _write(store, 3)
    assert after is not before and _count(store) == 2
