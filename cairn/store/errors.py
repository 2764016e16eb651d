"""The drivers' errors, translated at the store's edge: an outage becomes
:class:`~cairn.errors.StoreUnavailable`, a refused value
:class:`~cairn.errors.StoreRefused`, each chained from the driver's error — nothing
above the store needs to know which driver it talks to.

The hot path's SQL runs on psycopg below SQLAlchemy (:mod:`cairn.store.fastpath`), so
both families are translated, and a connection the server dropped is discarded on the
way: the next checkout (a retry) connects afresh instead of failing again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc

from cairn.errors import StoreRefused, StoreUnavailable

_OUTAGES = (psycopg.OperationalError, psycopg.InterfaceError)


@contextmanager
def translated(connection: Connection | None = None) -> Iterator[None]:
    try:
        yield
    except _OUTAGES as error:
        if connection is not None:
            connection.invalidate()
        raise StoreUnavailable(f"the database cannot be reached: {error}") from error
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as error:
        raise StoreUnavailable(f"the database cannot be reached: {error.orig}") from error
    except (sa_exc.DataError, psycopg.DataError) as error:
        raise StoreRefused(f"the database refused a value: {error}") from error
