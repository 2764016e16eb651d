"""On SQLite a thread keeps one connection for its steps' writes (cairn.store.sqlite
KeptConnections), with other threads writing: never more than the limit (the rest use the
pool), closed once its thread has ended, closed at dispose. One thread's:
tests/unit/test_sqlite_kept.py."""

from __future__ import annotations

import threading

from sqlalchemy import Connection

from cairn.store.sqlite import KeptConnections, SqliteStore
from tests.unit import test_sqlite_kept as unit
from tests.unit.test_sqlite_kept import _count, _write

store = unit.store


def _in_thread(store: SqliteStore, n: int) -> Connection:
    used: list[Connection] = []
    thread = threading.Thread(target=lambda: used.append(_write(store, n)))
    thread.start()
    thread.join()
    return used[0]


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


def test_dispose_closes_every_kept_connection(store: SqliteStore) -> None:
    kept = [_write(store, 1), _in_thread(store, 2)]
    store.dispose()
    assert all(connection.closed for connection in kept)
