"""What a handler raises to say how its failure should be answered.

    raise cairn.TransientError("rate limited")       # retry by the node's policy
    raise cairn.PermanentError("no such customer")   # fail now, or take on_error.permanent
    raise cairn.BusinessError("card declined")       # take on_error.business

Any exception can also be annotated instead of wrapped: ``raise cairn.classified(exc,
"transient")``. Exceptions that say nothing are classified by
:func:`cairn.model.classify.classify` (timeouts, connection failures, the outages of
database and cache drivers, and HTTP 408/429/502/503/504 are transient; everything else
is permanent).

Inside ``ctx.effect``'s call, a transient failure may leave the effect's outcome unknown
(the request was sent; did it take effect?). A call that knows it did not take effect
says so — ``raise cairn.NotApplied("quota exhausted") from exc``, or any exception
annotated with ``cairn.not_applied(exc)`` — and the ledger records it ``failed``, not
``unknown`` (see docs/effects.md).
"""

from __future__ import annotations

from typing import TypeVar

from cairn.model.definition import ErrorClass

_E = TypeVar("_E", bound=BaseException)


class HandlerError(Exception):
    """Base of the errors a handler raises on purpose; ``error_class`` says what to do."""

    error_class: ErrorClass = ErrorClass.PERMANENT


class TransientError(HandlerError):
    """It may work if tried again: the node's retry policy applies — after
    ``retry_after_s`` instead of the policy's backoff, when the other side said when
    (a 429's ``Retry-After``)."""

    error_class = ErrorClass.TRANSIENT

    def __init__(self, *args: object, retry_after_s: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after_s = retry_after_s


class PermanentError(HandlerError):
    """Trying again will not help: fail now, or take the node's permanent error edge."""

    error_class = ErrorClass.PERMANENT


class BusinessError(HandlerError):
    """A rule said no (not a fault): take the node's business error edge."""

    error_class = ErrorClass.BUSINESS


class NotApplied(TransientError):
    """Raised by an effect's call: it did not take effect — refused, or failed before the
    request was sent — and trying again may work. The effects ledger records the effect
    ``failed`` (a retry calls again), never ``unknown``."""

    effect_applied = False


class StaleClaim(TransientError):
    """This worker's claim of the node was taken over: no effect made. Raised by
    ``ctx.effect`` before it records an intent or calls, when PostgreSQL has a newer claim
    of the execution on record, or the worker no longer trusts its lease. Transient: the
    node's newer holder does the work (and the stale holder's result is not committed)."""


class BudgetExceeded(PermanentError):
    """``ctx.charge`` took the execution past what it may spend (the run's budget, its
    branch's part, or its node's): trying again would not have more to spend."""


class Cancelled(Exception):
    """Raised by ``ctx.raise_if_cancelled()`` at a safe point once the run is being
    cancelled: the node ends cancelled and nothing it returned is kept."""


class DeadlineExceeded(BaseException):
    """The node's timeout passed while its handler ran: raised into a synchronous
    handler at its current call (in a worker's main thread). A BaseException, as
    ``asyncio.CancelledError`` is, so that a handler's ``except Exception`` cannot
    swallow it; its cleanup (``finally``, ``with``) still runs. A transient failure: the
    node's retry policy applies."""

    error_class = ErrorClass.TRANSIENT


def classified(error: _E, error_class: ErrorClass | str) -> _E:
    """Annotate ``error`` with the class its failure belongs to; returns it, to raise."""
    error.error_class = ErrorClass(error_class)  # type: ignore[attr-defined]
    return error


def not_applied(error: _E) -> _E:
    """Annotate ``error``, raised by an effect's call, as one that did not take effect
    (as :class:`NotApplied` says); returns it, to raise. Its error class is unchanged."""
    error.effect_applied = False  # type: ignore[attr-defined]
    return error
