"""SQLite, the embedded default's database: one process, one writer. Transactions take
the write lock at BEGIN (``BEGIN IMMEDIATE``), so that two never both read and then
deadlock upgrading to write; ``busy_timeout`` queues them. The portable statements serve
as they are: with one writer there is nothing to skip and no one to race.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.dialects import sqlite

from cairn.store.records import utcnow
from cairn.store.sql import Store, Tx


class SqliteTx(Tx):
    def _insert(self, table: Any) -> Any:
        return sqlite.insert(table)

    def stamp(self) -> Any:
        return utcnow()  # one process on one machine: its clock

    def now(self) -> float:
        return utcnow().timestamp()


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
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
