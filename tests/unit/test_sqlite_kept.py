"""On SQLite a thread keeps one connection for its steps' writes (cairn.store.sqlite
KeptConnections): the same one each time, never more than the limit (the rest use the
pool), closed once its thread has ended, dropped after a failure, closed at dispose."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from cairn.store.database import make_engine
from cairn.store.sqlite import KeptConnections, SqliteStore


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


def _in_thread(store: SqliteStore, n: int) -> Connection:
    used: list[Connection] = []
    thread = threading.Thread(target=lambda: used.append(_write(store, n)))
    thread.start()
    thread.join()
    return used[0]


def test_a_thread_writes_on_one_connection_it_keeps(store: SqliteStore) -> None:
    first, second = _write(store, 1), _write(store, 2)
    assert first is second and not first.closed
    assert _count(store) == 2  # each write committed
    with store.statements() as tx:  # reads take one from the pool
        assert tx.connection is not first


def test_past_the_limit_a_thread_takes_one_from_the_pool(store: SqliteStore) -> None:
    store._kept = KeptConnections(store.engine, 1)
    kept = _write(store, 1)
    done = threading.Event()
    other: list[Connection] = []

    def write_twice() -> None:
        other.extend([_write(store, 2), _write(store, 3)])
        done.set()

    # while this thread lives and keeps the one, another gets a new one each time
    thread = threading.Thread(target=write_twice)
    thread.start()
    thread.join()
    assert done.is_set() and other[0] is not other[1] and kept not in other
    assert all(connection.closed for connection in other)  # handed back to the pool
    assert _count(store) == 3


def test_a_connection_kept_by_a_thread_that_ended_is_closed(store: SqliteStore) -> None:
    store._kept = KeptConnections(store.engine, 1)
    gone = _in_thread(store, 1)  # kept, and its thread ends
    assert not gone.closed
    mine = _write(store, 2)  # the next thread to take one closes it
    assert gone.closed and mine is not gone
    assert _count(store) == 2


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


def test_dispose_closes_every_kept_connection(store: SqliteStore) -> None:
    kept = [_write(store, 1), _in_thread(store, 2)]
    store.dispose()
    assert all(connection.closed for connection in kept)
