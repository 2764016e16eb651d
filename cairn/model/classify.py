"""Which error class a handler's exception belongs to — and, for an effect's call,
whether its failure may have taken effect.

In order: what the exception declares (``error_class``, set by
:class:`cairn.TransientError` and friends or by :func:`cairn.classified`); an outage of
a database or cache driver (psycopg's ``OperationalError``/``InterfaceError``,
SQLAlchemy's ``DBAPIError`` of one or of an invalidated connection, redis's
``ConnectionError``/``TimeoutError``) is transient; an HTTP status it carries (408, 429
and every 5xx but 501 and 505 are transient — the server's trouble, as a model
provider's; any other 4xx, and 501 Not Implemented and 505 HTTP Version Not Supported,
which no retry changes, are permanent); timeouts and connection
failures, built-in or from an HTTP client library (urllib's ``URLError`` by the error it
wraps), are transient; anything else — validation and permission errors included — is
permanent.

This module is imported by the effects ledger and the runner: it imports no driver.
A driver's errors are recognised through ``sys.modules`` — if psycopg was never
imported, no psycopg error can exist.
"""

from __future__ import annotations

import socket
import sys
from collections import deque
from collections.abc import Iterator

from cairn.errors import StoreUnavailable
from cairn.model.definition import ErrorClass

TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectionError,  # includes resets, refusals, broken pipes
    socket.timeout,
    socket.gaierror,  # a name that did not resolve (as httpx's and requests' errors say)
    StoreUnavailable,  # cairn's own outage, should a handler let it out wrapped or not
)
# 4xx: the request was at fault (but a timeout, or too many at once); 5xx: the server was,
# and may not be on the next try — but for what it says it will never do.
TRANSIENT_STATUS = frozenset({408, 429, *range(500, 600)}) - {501, 505}
# HTTP client libraries (requests, httpx, urllib3, aiohttp) have timeout and connection
# errors of their own, not all derived from the built-in ones; recognised by class name
# so that cairn needs none of them installed.
TRANSIENT_NAME_SUFFIXES = (
    "Timeout",
    "TimeoutError",
    "TimeoutException",
    "ConnectError",
    "ConnectionError",
    "ConnectTimeout",
    "ReadTimeout",
    "RemoteProtocolError",
)


def classify(error: BaseException) -> ErrorClass:
    declared = getattr(error, "error_class", None)
    if declared is not None:
        try:
            return ErrorClass(declared)
        except ValueError:
            pass
    if driver_outage(error):
        return ErrorClass.TRANSIENT
    status = http_status(error)
    if status is not None:
        if status in TRANSIENT_STATUS:
            return ErrorClass.TRANSIENT
        if 400 <= status < 600:
            return ErrorClass.PERMANENT
    if isinstance(error, TRANSIENT_TYPES) or _named(error, TRANSIENT_NAME_SUFFIXES):
        return ErrorClass.TRANSIENT
    reason = _url_error_reason(error)
    if reason is not None:  # urllib wraps what failed while connecting and sending
        return classify(reason)
    return ErrorClass.PERMANENT


def driver_outage(error: BaseException) -> bool:
    """True if ``error`` is a database or cache driver saying its server is unreachable
    (psycopg/psycopg2 ``OperationalError``/``InterfaceError``, SQLAlchemy's
    ``DBAPIError`` with an invalidated connection or wrapping one of those, redis's
    ``ConnectionError``/``TimeoutError``) — without importing any of them."""
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(error, sa_exc.DBAPIError):
        orig = error.orig
        return bool(error.connection_invalidated) or (
            isinstance(orig, BaseException) and driver_outage(orig)
        )
    for name in ("psycopg", "psycopg2"):
        driver = sys.modules.get(name)
        if driver is not None and isinstance(
            error, (driver.OperationalError, driver.InterfaceError)
        ):
            return True
    redis_exc = sys.modules.get("redis.exceptions")
    return redis_exc is not None and isinstance(
        error, (redis_exc.ConnectionError, redis_exc.TimeoutError)
    )


def http_status(error: BaseException) -> int | None:
    """The HTTP status an exception carries, in the shapes common clients use:
    ``status_code`` or ``status`` on the error or on its ``response``, ``code`` on
    urllib's HTTPError."""
    for holder in (error, getattr(error, "response", None)):
        if holder is None:
            continue
        for name in ("status_code", "status"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
                return value
    code = getattr(error, "code", None)
    if type(error).__name__ == "HTTPError" and isinstance(code, int):
        return code
    return None


# -- did a failed call take effect? ------------------------------------------------------

# Raised before the request left: nothing can have taken effect.
NOT_SENT_TYPES: tuple[type[BaseException], ...] = (
    ConnectionRefusedError,
    socket.gaierror,  # the name did not resolve
)
NOT_SENT_NAME_SUFFIXES = (
    "ConnectError",  # httpx (refused, DNS)
    "ConnectTimeout",  # httpx, requests
    "ConnectTimeoutError",  # urllib3
    "NewConnectionError",  # urllib3
    "NameResolutionError",  # urllib3 2
    "PoolTimeout",  # httpx: no connection to send it on
    "ConnectorError",  # aiohttp's ClientConnectorError and its kin
    "ConnectionTimeoutError",  # aiohttp
)
# Raised once the request was (or may have been) sent: its outcome is not known.
SENT_TYPES: tuple[type[BaseException], ...] = (
    ConnectionResetError,  # includes http.client.RemoteDisconnected
    ConnectionAbortedError,
    BrokenPipeError,
)
SENT_NAME_SUFFIXES = (
    "ReadTimeout",
    "ReadTimeoutError",
    "WriteTimeout",
    "ReadError",
    "WriteError",
    "RemoteDisconnected",
    "RemoteProtocolError",
    "ProtocolError",
    "IncompleteRead",
    "ChunkedEncodingError",
    "ServerDisconnectedError",
    "ServerTimeoutError",
    "BadStatusLine",
)


def may_have_applied(error: BaseException) -> bool:
    """Could an effect's call that raised ``error`` have taken effect? False — it
    certainly did not — if it says so (:class:`cairn.NotApplied`,
    :func:`cairn.not_applied`), if the request never left (connection refused, DNS
    failure, connect timeouts — built-in, urllib, httpx, requests, urllib3, aiohttp, by
    type or class name), or if the server answered 4xx (408 and 429 included: it
    declined). True — its outcome is unknown — if the request left and no answer says
    what became of it: read timeouts, resets, remote disconnects, protocol errors, 5xx
    answers. An error that says neither is unknown if it is transient and not applied if
    it is permanent or business (a validation error, a refusal the handler raised).

    The error is looked at first, then what it wraps (``__cause__``, the exceptions in
    its ``args``, a ``reason``), nearest first; the first that tells decides. An implicit
    ``__context__`` is not followed: it may be an unrelated earlier failure, and calling
    an outcome unknown is the safe mistake."""
    for found in _wrapped(error):
        sent = _sent(found)
        if sent is not None:
            return sent
    return classify(error) is ErrorClass.TRANSIENT


def _sent(error: BaseException) -> bool | None:
    """Whether ``error`` says the request left without an answer saying it failed (True),
    that it did not take effect (False), or nothing."""
    if getattr(error, "effect_applied", None) is False:
        return False
    status = http_status(error)
    if status is not None:  # the server refused it (4xx), or its outcome is unknown
        return not 400 <= status < 500
    if isinstance(error, NOT_SENT_TYPES) or _named(error, NOT_SENT_NAME_SUFFIXES):
        return False
    if _is_url_error(error):
        return False  # urllib raises URLError only while connecting and sending
    if isinstance(error, SENT_TYPES) or _named(error, SENT_NAME_SUFFIXES):
        return True
    return None


def _wrapped(error: BaseException, limit: int = 20) -> Iterator[BaseException]:
    """``error`` and the exceptions it wraps, breadth first."""
    seen: set[int] = set()
    queue: deque[BaseException] = deque([error])
    while queue and len(seen) < limit:
        current = queue.popleft()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            queue.append(current.__cause__)
        queue.extend(arg for arg in current.args if isinstance(arg, BaseException))
        reason = getattr(current, "reason", None)
        if isinstance(reason, BaseException):
            queue.append(reason)


def _named(error: BaseException, suffixes: tuple[str, ...]) -> bool:
    return any(cls.__name__.endswith(suffixes) for cls in type(error).__mro__)


def _is_url_error(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    return "URLError" in names and "HTTPError" not in names


def _url_error_reason(error: BaseException) -> BaseException | None:
    """The error urllib's ``URLError`` (not ``HTTPError``) wraps, if it wraps one."""
    reason = getattr(error, "reason", None)
    return reason if _is_url_error(error) and isinstance(reason, BaseException) else None
