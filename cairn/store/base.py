"""What every statement of the store stands on: a transaction (or a read-only
connection), and the few things a database decides for itself — how to upsert, which
clock to stamp with, whether rows another transaction holds are skipped. Each backend
says so by overriding these hooks (:mod:`cairn.store.postgres`, :mod:`cairn.store.sqlite`);
nothing else in cairn asks which database it talks to.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select


class TxBase:
    """One database transaction (or a read-only connection)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def _insert(self, table: Any) -> Any:
        """An INSERT that can say ``ON CONFLICT``."""
        raise NotImplementedError

    def _skip_locked(self, query: Select[Any]) -> Select[Any]:
        """Lock the rows ``query`` selects for this transaction, skipping those another
        holds (several schedulers share the work); a database with one writer needs
        neither."""
        return query

    def _share_locked(self, query: Select[Any]) -> Select[Any]:
        """Lock the rows ``query`` selects against deletion and change until this
        transaction ends, letting other readers lock them too; a database with one writer
        needs nothing."""
        return query

    def stamp(self) -> Any:
        """The time to write into a column something later compares with :meth:`now`
        (dispatch, outbox and ledger ages): the database's own clock, never this
        process's, which may be minutes off."""
        raise NotImplementedError

    def now(self) -> float:
        """Seconds since the epoch by the database's clock: the one clock all processes
        share."""
        raise NotImplementedError
