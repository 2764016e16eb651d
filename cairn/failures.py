"""What a handler raises to say how its failure should be answered.

    raise cairn.TransientError("rate limited")       # retry by the node's policy
    raise cairn.PermanentError("no such customer")   # fail now, or take on_error.permanent
    raise cairn.BusinessError("card declined")       # take on_error.business

Any exception can also be annotated instead of wrapped: ``raise cairn.classified(exc,
"transient")``. Exceptions that say nothing are classified by
:func:`cairn.workers.classify.classify` (timeouts, connection failures and HTTP
429/502/503/504 are transient; everything else is permanent).
"""

from __future__ import annotations

from typing import TypeVar

from cairn.orchestrator.definition import ErrorClass

_E = TypeVar("_E", bound=BaseException)


class HandlerError(Exception):
    """Base of the errors a handler raises on purpose; ``error_class`` says what to do."""

    error_class: ErrorClass = ErrorClass.PERMANENT


class TransientError(HandlerError):
    """It may work if tried again: the node's retry policy applies."""

    error_class = ErrorClass.TRANSIENT


class PermanentError(HandlerError):
    """Trying again will not help: fail now, or take the node's permanent error edge."""

    error_class = ErrorClass.PERMANENT


class BusinessError(HandlerError):
    """A rule said no (not a fault): take the node's business error edge."""

    error_class = ErrorClass.BUSINESS


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
