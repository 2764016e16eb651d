"""When a request is tried again, and how long the client waits first.

Tried again: a connection that failed or dropped before an answer, a timeout, and the
answers that say "later" — 429, 502, 503, 504. Every request the clients send may be
sent twice safely: reads change nothing, a submit (and each batch item) carries a
request id, a signal a signal id, and a second cancel changes nothing. So a retry after
an answer was lost on the way back finds the run the first try made, never a second one.

The wait grows exponentially with jitter; a ``Retry-After`` (seconds, or an HTTP date)
is waited for instead, unless it is longer than the policy allows, which ends the tries.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from cairn.http.errors import ApiError, error_from

RETRY_STATUSES = frozenset({429, 502, 503, 504})


class RetryableAnswer(Exception):
    """An answer that says "try again later" (internal: the tries turn the last one into
    an :class:`ApiError`)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
        self.retry_after_s = retry_after_s(response)


@dataclass(frozen=True)
class RetryPolicy:
    """How often a request is tried and how long the client waits between tries: the
    first wait ``backoff_s``, doubling up to ``max_backoff_s``, jittered; a server's
    ``Retry-After`` is honoured up to ``max_retry_after_s``. Pass one as ``retry=`` to
    :class:`Client` or :class:`AsyncClient`."""

    attempts: int = 5  # in all, the first included
    backoff_s: float = 0.2  # the first wait; each further one doubles, up to max_backoff_s
    max_backoff_s: float = 10.0
    max_retry_after_s: float = 60.0  # a longer Retry-After ends the tries at once

    def options(self) -> dict[str, Any]:
        """Arguments of :class:`tenacity.Retrying` and :class:`tenacity.AsyncRetrying`."""

        def wait(state: tenacity.RetryCallState) -> float:
            asked = _asked_wait(state)
            if asked is not None:
                return asked
            # Jittered, so that clients cut off together do not all come back together.
            doubled = self.backoff_s * 2 ** (state.attempt_number - 1)
            return float(min(doubled + random.uniform(0, self.backoff_s), self.max_backoff_s))

        def stop(state: tenacity.RetryCallState) -> bool:
            asked = _asked_wait(state)
            too_long = asked is not None and asked > self.max_retry_after_s
            return too_long or state.attempt_number >= self.attempts

        return {
            "stop": stop,
            "wait": wait,
            "retry": tenacity.retry_if_exception(is_transient),
            "reraise": True,
        }


def is_transient(exc: BaseException) -> bool:
    """Worth trying again: a "later" answer, or no answer at all. Not a malformed URL,
    an unsupported scheme or a request this client could not even write."""
    return isinstance(
        exc, RetryableAnswer | httpx.TimeoutException | httpx.NetworkError | httpx.ProtocolError
    ) and not isinstance(exc, httpx.LocalProtocolError)


def checked(response: httpx.Response) -> httpx.Response:
    """The response if it is a success; else raise what it says (read it first)."""
    if response.is_success:
        return response
    if response.status_code in RETRY_STATUSES:
        raise RetryableAnswer(response)
    raise error_from(response.status_code, _json(response), response.text[:200])


@contextmanager
def giving_up() -> Iterator[None]:
    """Turn what ended the tries into an :class:`ApiError`: the last "later" answer, or
    the last connection failure (``status`` None, code ``unreachable``)."""
    try:
        yield
    except RetryableAnswer as exc:
        response = exc.response
        raise error_from(response.status_code, _json(response), response.text[:200]) from exc
    except httpx.TransportError as exc:
        raise ApiError(f"the API did not answer: {exc!r}", status=None, code="unreachable") from exc


def retry_after_s(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (given as seconds or as an HTTP date), if any."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _asked_wait(state: tenacity.RetryCallState) -> float | None:
    exc = state.outcome.exception() if state.outcome is not None else None
    return exc.retry_after_s if isinstance(exc, RetryableAnswer) else None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
