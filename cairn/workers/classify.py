"""Which error class a handler's exception belongs to.

In order: what the exception declares (``error_class``, set by
:class:`cairn.TransientError` and friends or by :func:`cairn.classified`); an HTTP status
it carries (429, 502, 503, 504 and 408 are transient; any other 4xx is permanent);
timeouts and connection failures, built-in or from an HTTP client library, are
transient; anything else — validation and permission errors included — is permanent.
"""

from __future__ import annotations

import socket

from cairn.orchestrator.definition import ErrorClass

TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectionError,  # includes resets, refusals, broken pipes
    socket.timeout,
)
TRANSIENT_STATUS = frozenset({408, 429, 502, 503, 504})
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
    status = http_status(error)
    if status is not None:
        if status in TRANSIENT_STATUS:
            return ErrorClass.TRANSIENT
        if 400 <= status < 500:
            return ErrorClass.PERMANENT
    if isinstance(error, TRANSIENT_TYPES) or any(
        cls.__name__.endswith(TRANSIENT_NAME_SUFFIXES) for cls in type(error).__mro__
    ):
        return ErrorClass.TRANSIENT
    return ErrorClass.PERMANENT


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
