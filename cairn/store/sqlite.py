"""SQLite, the embedded default's database: one process, one writer. Transactions take
the write lock at BEGIN (``BEGIN IMMEDIATE``), so that two never both read and then
deadlock upgrading to write; ``busy_timeout`` queues them. The portable statements serve
as they are — with one writer there is nothing to skip and no one to race — but for a
step's read and its write, constant SQL below SQLAlchemy (:mod:`cairn.store.sqlite_fastpath`),
the write on a connection its thread keeps (:class:`KeptConnections`).
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event, exc
from sqlalchemy.dialects import sqlite

from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import StepWrites
from cairn.store import sqlite_fastpath as fastpath
from cairn.store.errors import translated
from cairn.store.records import ExecutionHead, RunRecord, StepCompletion, utcnow
from cairn.store.sql import Store, Tx

_F = TypeVar("_F", bound=Callable[..., Any])


def _driver_errors(method: _F) -> _F:
    """The driver's errors raised as SQLAlchemy's would have been — what the store's
    translation reads (a CHECK refused, the database unreachable): the constant SQL runs
    on the sqlite3 connection, below SQLAlchemy."""

    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(None, None, error, sqlite3.Error) from error

    return wrapped  # type: ignore[return-value]


class SqliteTx(Tx):
    def _insert(self, table: Any) -> Any:
        return sqlite.insert(table)

    def stamp(self) -> Any:
        return utcnow()  # one process on one machine: its clock

    def now(self) -> float:
        return utcnow().timestamp()

    def _driver(self) -> Any:
        """The sqlite3 connection under this transaction (see cairn.store.sqlite_fastpath)."""
        return self.connection.connection.driver_connection

    @_driver_errors
    def visible_versions(self, caller: str, name: str, owner: str | None) -> list[tuple[str, int]]:
        return fastpath.visible_versions(self._driver(), caller, name, owner)

    @_driver_errors
    def insert_run(self, values: Mapping[str, Any]) -> bool:
        return fastpath.insert_run(self._driver(), fastpath.codec(self.connection.dialect), values)

    @_driver_errors
    def execution_and_run(self, key: ExecutionKey) -> tuple[ExecutionHead | None, RunRecord | None]:
        coder = fastpath.codec(self.connection.dialect)
        row = fastpath.execution_and_run(self._driver(), coder, key)
        return self._execution_and_run_of(row, key)

    @_driver_errors
    def complete_step(
        self,
        key: ExecutionKey,
        *,
        attempt: int,
        fence: int,
        known_seq: int,
        result: Mapping[str, Any],
        writes: StepWrites,
    ) -> StepCompletion:
        return fastpath.complete_step(
            self._driver(),
            fastpath.codec(self.connection.dialect),
            key,
            attempt=attempt,
            fence=fence,
            known_seq=known_seq,
            result=result,
            writes=writes,
            now=self.stamp(),
        )

    @_driver_errors
    def write_step(self, run_id: str, writes: StepWrites, *, last: bool = True) -> list[int]:
        coder = fastpath.codec(self.connection.dialect)
        return fastpath.write_step(self._driver(), coder, run_id, writes, self.stamp())


class SqliteStore(Store):
    tx_class = SqliteTx

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        _serialise_writers(engine)
        self._kept = KeptConnections(engine, KEPT_CONNECTIONS)

    def dispose(self) -> None:
        self._kept.close()
        super().dispose()

    @contextmanager
    def statements(self, *, writes: bool = False) -> Iterator[Tx]:
        """A step's write on the thread's own connection, kept open between its steps
        (:class:`KeptConnections`); anything else as :meth:`Store.statements`."""
        kept = self._kept.take() if writes else None
        if kept is None:
            with super().statements(writes=writes) as tx:
                yield tx
            return
        try:
            with translated(), kept.begin(), translated(kept):
                yield self.tx_class(kept)
        except BaseException:
            self._kept.discard(kept)  # rolled back; its state after a failure not relied on
            raise


# Threads that keep a connection of their own for their steps' writes, at most; any other
# takes one from the pool each time, as readers do.
KEPT_CONNECTIONS = 16


class KeptConnections:
    """A connection per thread for the hot path's write transactions, opened once and
    kept: taking one from the pool and handing it back cost about as much Python as the
    step's statements (SQLAlchemy's checkout, reset and checkin around each). The pool
    still serves readers, every other transaction, and threads past ``most``; a thread
    that ended has its connection closed by the next thread to take one."""

    def __init__(self, engine: Engine, most: int) -> None:
        self._engine, self._most = engine, most
        self._lock = threading.Lock()
        self._held: dict[threading.Thread, Connection] = {}

    def take(self) -> Connection | None:
        """This thread's connection (None: ``most`` threads keep one already)."""
        thread = threading.current_thread()
        connection = self._held.get(thread)
        if connection is not None and not connection.closed:
            return connection
        with self._lock:
            for ended in [t for t in self._held if not t.is_alive()]:
                self._held.pop(ended).close()
            if len(self._held) >= self._most:
                return None
            connection = self._held[thread] = self._engine.connect()
        return connection

    def discard(self, connection: Connection) -> None:
        with self._lock:
            for thread, held in list(self._held.items()):
                if held is connection:
                    del self._held[thread]
        connection.close()

    def close(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for connection in held:
            connection.close()


def _serialise_writers(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _autocommit_driver(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    @_driver_errors
    def _begin_immediate(connection: Connection) -> None:
        read_only = connection.get_execution_options().get("cairn_read_only", False)
        # On the driver's connection: SQLAlchemy's statement machinery (an execution
        # context, a result) cost a third of opening a step's transaction.
        driver: Any = connection.connection.driver_connection
        driver.execute("BEGIN" if read_only else "BEGIN IMMEDIATE")
