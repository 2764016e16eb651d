"""The database engines: what a process lets go of when it shuts down; how the hot path's
connections plan their statements."""

from __future__ import annotations

import threading

from sqlalchemy import text

from cairn.store.backends import store_for
from cairn.store.database import make_engine


def test_a_connection_handed_back_after_dispose_is_closed_not_left_open(
    database_url: str,
) -> None:
    store = store_for(make_engine(database_url))
    busy, finish = threading.Event(), threading.Event()
    seen: list[object] = []

    def request() -> None:  # a request still finishing while its process shuts down
        with store.reading() as tx:
            tx.connection.execute(text("SELECT 1"))
            seen.append(tx.connection.connection.dbapi_connection)
            busy.set()
            finish.wait(10)

    thread = threading.Thread(target=request)
    thread.start()
    assert busy.wait(10)
    with store.reading() as tx:  # one idle in the pool, closed by dispose itself
        idle = tx.connection.connection.dbapi_connection
    store.dispose()
    finish.set()
    thread.join(10)
    (late,) = seen
    assert idle.closed and late.closed  # type: ignore[attr-defined]
    with store.reading() as tx:  # the store still answers (a new pool), then closes it
        after = tx.connection.connection.dbapi_connection
        assert tx.connection.execute(text("SELECT 1")).scalar() == 1
    assert not after.closed  # type: ignore[attr-defined]
    store.dispose()
    assert after.closed  # type: ignore[attr-defined]


def _plan_cache_mode(store: object, *, statements: bool) -> str:
    opened = store.statements() if statements else store.reading()  # type: ignore[attr-defined]
    with opened as tx:
        return str(tx.connection.execute(text("SHOW plan_cache_mode")).scalar())


def test_the_hot_paths_statements_are_planned_once_per_connection(database_url: str) -> None:
    """A step's statements (Store.statements: prepared, found by key) run the generic plan
    from their first execution on a connection; transactions plan as PostgreSQL chooses."""
    store = store_for(make_engine(database_url))
    try:
        assert _plan_cache_mode(store, statements=True) == "force_generic_plan"
        assert _plan_cache_mode(store, statements=False) == "auto"
    finally:
        store.dispose()
