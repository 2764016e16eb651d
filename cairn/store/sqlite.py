"""SQLite, the embedded default's database: one process, one writer. Transactions take
the write lock at BEGIN (``BEGIN IMMEDIATE``), so that two never both read and then
deadlock upgrading to write; ``busy_timeout`` queues them. The portable statements serve
as they are — with one writer there is nothing to skip and no one to race — but for a
step's read and its write, constant SQL below SQLAlchemy (:mod:`cairn.store.sqlite_fastpath`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine, event, exc
from sqlalchemy.dialects import sqlite

from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import StepWrites
from cairn.store import sqlite_fastpath as fastpath
from cairn.store.records import ExecutionHead, RunRecord, StepCompletion, utcnow
from cairn.store.sql import Store, Tx


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

    def execution_and_run(self, key: ExecutionKey) -> tuple[ExecutionHead | None, RunRecord | None]:
        coder = fastpath.codec(self.connection.dialect)
        row = fastpath.execution_and_run(self._driver(), coder, key)
        return self._execution_and_run_of(row, key)

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

    def write_step(self, run_id: str, writes: StepWrites, *, last: bool = True) -> list[int]:
        coder = fastpath.codec(self.connection.dialect)
        return fastpath.write_step(self._driver(), coder, run_id, writes, self.stamp())


class SqliteStore(Store):
    tx_class = SqliteTx

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        _serialise_writers(engine)


def _serialise_writers(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _autocommit_driver(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Connection) -> None:
        read_only = connection.get_execution_options().get("cairn_read_only", False)
        # On the driver's connection: SQLAlchemy's statement machinery (an execution
        # context, a result) cost a third of opening a step's transaction.
        statement = "BEGIN" if read_only else "BEGIN IMMEDIATE"
        driver: Any = connection.connection.driver_connection
        try:
            driver.execute(statement)
        except sqlite3.Error as error:  # as SQLAlchemy's own call would have raised it
            raise exc.DBAPIError.instance(statement, None, error, sqlite3.Error) from error
