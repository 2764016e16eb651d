"""The drivers' errors, translated at the store's edge: an outage becomes
:class:`~cairn.errors.StoreUnavailable`, a refused value
:class:`~cairn.errors.StoreRefused`, each chained from the driver's error — nothing
above the store needs to know which driver it talks to.

The hot path's SQL runs on psycopg below SQLAlchemy (:mod:`cairn.store.fastpath`), so
both families are translated, and a connection the server dropped is discarded on the
way: the next checkout (a retry) connects afresh instead of failing again.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc

from cairn.errors import StaleTransition, StoreRefused, StoreUnavailable

# cairn_refuse (migration 0011): a guard inside one of the step's statements found
# nothing to move.
REFUSED_STATE = "CRN01"
CHECK_VIOLATION = "23514"


def _driver_error(error: BaseException) -> BaseException:
    return error.orig if isinstance(error, sa_exc.DBAPIError) and error.orig else error


def _psycopg() -> ModuleType | None:
    """psycopg, if a PostgreSQL store loaded it: when none did, nothing raised one of its
    errors — and the embedded default (SQLite) never pays for importing it."""
    return sys.modules.get("psycopg")


@contextmanager
def translated(connection: Connection | None = None) -> Iterator[None]:
    try:
        yield
    except Exception as error:
        psycopg = _psycopg()
        if not isinstance(error, sa_exc.DBAPIError) and not (
            psycopg is not None and isinstance(error, psycopg.Error)
        ):
            raise
        translation = _translation(error, connection, psycopg)
        if translation is error:
            raise
        raise translation from error


def _translation(
    error: BaseException, connection: Connection | None, psycopg: ModuleType | None
) -> BaseException:
    driver = _driver_error(error)
    sqlstate = getattr(driver, "sqlstate", None)
    if sqlstate == REFUSED_STATE:
        message = getattr(getattr(driver, "diag", None), "message_primary", None)
        return StaleTransition(message or str(driver))
    if psycopg is not None and isinstance(
        driver, psycopg.OperationalError | psycopg.InterfaceError
    ):
        if connection is not None and isinstance(error, psycopg.Error):
            connection.invalidate()
        return StoreUnavailable(f"the database cannot be reached: {driver}")
    if isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError):
        return StoreUnavailable(f"the database cannot be reached: {driver}")
    if isinstance(error, sa_exc.DataError) or (
        psycopg is not None and isinstance(error, psycopg.DataError)
    ):
        return StoreRefused(f"the database refused a value: {error}")
    if sqlstate == CHECK_VIOLATION or "CHECK constraint failed" in str(driver):
        return StoreRefused(f"the database refused a value: {driver}")
    return error
