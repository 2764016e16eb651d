"""Riding out a restart of PostgreSQL or Redis: which errors mean "the service is away",
and retrying through them with backoff.

A worker that has run a handler holds a result nobody else has; losing it to a database
restart means running the node again. So the steps around a handler (the read before
it, the claim, the commit after it) retry through an outage with exponential backoff
(full jitter, so that a fleet does not reconnect in step), up to
``CAIRN_RECONNECT_WITHIN`` seconds; only then does the error reach the broker layer,
which puts the message back rather than acking it. Errors that are not outages (a
constraint, a bug) are never retried here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import psycopg
import redis
from sqlalchemy import exc as sa_exc
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from cairn.errors import StoreUnavailable

log = logging.getLogger(__name__)

_T = TypeVar("_T")

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 2.0


def is_outage(error: BaseException) -> bool:
    """True if ``error`` means PostgreSQL or Redis is unreachable (restarting, network),
    rather than that the request itself was wrong — including :class:`StoreUnavailable`,
    an outage cairn already rode out as long as it may (the effects ledger's)."""
    if isinstance(error, StoreUnavailable):
        return True
    if isinstance(error, sa_exc.DBAPIError):
        return error.connection_invalidated or (error.orig is not None and is_outage(error.orig))
    return isinstance(
        error,
        psycopg.OperationalError
        | psycopg.InterfaceError
        | redis.ConnectionError
        | redis.TimeoutError
        | ConnectionError
        | TimeoutError,
    )


def through_outages(within_s: float, what: str, call: Callable[[], _T]) -> _T:
    """``call()``, retried with backoff while it fails with an outage, for up to
    ``within_s`` seconds; then its last error is raised. The first try costs nothing
    extra: it is on every step's path."""
    try:
        return call()
    except Exception as error:
        if not is_outage(error):
            raise

    def note(state: RetryCallState) -> None:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        log.warning(
            "%s: %s unreachable (attempt %d), retrying: %s",
            what,
            "redis" if isinstance(error, redis.RedisError) else "the database",
            state.attempt_number,
            error,
        )

    retrying = Retrying(
        retry=retry_if_exception(is_outage),
        wait=wait_random_exponential(multiplier=FIRST_DELAY_S, max=MAX_DELAY_S),
        stop=stop_after_delay(within_s),
        before_sleep=note,
        reraise=True,
    )
    return retrying(call)


def store_through_outages(within_s: float, what: str, call: Callable[[], _T]) -> _T:
    """:func:`through_outages` for the store's work inside a handler's step (an effect's
    ledger row, a checkpoint): an outage that outlasts ``within_s`` is
    :class:`~cairn.errors.StoreUnavailable` — cairn's outage, which gives the node back
    to the queue, never the handler's failure."""
    try:
        return through_outages(within_s, what, call)
    except StoreUnavailable:
        raise
    except Exception as error:
        if not is_outage(error):
            raise
        raise StoreUnavailable(
            f"{what}: the database was unreachable for {within_s:g} s: "
            f"{type(error).__name__}: {error}"
        ) from error
