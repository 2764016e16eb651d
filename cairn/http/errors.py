"""The API's refusals as exceptions: ``{"error": {"code", "message"}}`` becomes an
:class:`ApiError` carrying the HTTP status and the code.

Where the code is one of cairn's own errors, the exception is also that error's type
(an ``ApiError`` *and* a :class:`~cairn.errors.RunNotFound`, say), so code written
against :mod:`cairn.client` catches the same exceptions over HTTP. Its attributes are
the API's: a status, a code, a message — not the engine's internals (an
``IllegalTransition`` over HTTP has no ``machine`` or ``target``).
"""

from __future__ import annotations

from typing import Any

from cairn.errors import (
    ArtifactNotFound,
    CairnError,
    CodeUnavailable,
    ConfirmationRequired,
    EffectNotFound,
    EffectNotOpen,
    EventRejected,
    FlowConflict,
    Forbidden,
    IdempotencyConflict,
    IllegalTransition,
    InvalidInput,
    InvalidSchedule,
    NotPaused,
    NotWaiting,
    RunNotFound,
    ScheduleExists,
    ScheduleNotFound,
    SelectionChanged,
    StaleTransition,
    StoreRefused,
    StoreUnavailable,
    UnknownNode,
    UnknownSignal,
    UnknownWorkflow,
)


class ApiError(CairnError):
    """The API refused a request, or could not be reached in time (then ``status`` is
    None and ``code`` is ``unreachable``)."""

    code = "api_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        code: str,
        fields: list[dict[str, str]] | None = None,
    ) -> None:
        # Not super(): past ApiError the MRO may reach an error whose constructor takes
        # the engine's facts (IllegalTransition's machine, subject, ...), which HTTP lacks.
        CairnError.__init__(self, message)
        self.status = status
        self.code = code  # the instance's: the API may answer a code this client predates
        self.fields = fields or []

    def __reduce__(self) -> tuple[Any, ...]:
        # By code: the types made below are no module attributes pickle could name.
        return (_rebuild, (str(self), self.status, self.code, self.fields))


def _rebuild(message: str, status: int | None, code: str, fields: list[dict[str, str]]) -> ApiError:
    return ERROR_TYPES.get(code, ApiError)(message, status=status, code=code, fields=fields)


# The codes the API answers with that name one of cairn's errors (the API's own,
# unauthorized and validation_error among them, stay plain ApiErrors).
_CAIRN_ERRORS: tuple[type[CairnError], ...] = (
    RunNotFound,
    UnknownWorkflow,
    ArtifactNotFound,
    ScheduleNotFound,
    InvalidInput,
    InvalidSchedule,
    StoreRefused,
    StoreUnavailable,
    IdempotencyConflict,
    ScheduleExists,
    FlowConflict,
    EventRejected,
    UnknownSignal,
    NotWaiting,
    UnknownNode,
    IllegalTransition,
    ConfirmationRequired,
    StaleTransition,
    Forbidden,
    EffectNotFound,
    EffectNotOpen,
    CodeUnavailable,
    SelectionChanged,
    NotPaused,
)

ERROR_TYPES: dict[str, type[ApiError]] = {
    kind.code: type(kind.__name__, (ApiError, kind), {"__module__": __name__})
    for kind in _CAIRN_ERRORS
}


def error_from(status: int, body: Any, fallback: str) -> ApiError:
    """The exception for an error response: its ``{"error": {...}}`` body if it has one
    (a proxy's 502 page has not: then ``http_<status>`` and ``fallback``)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ApiError(fallback or f"HTTP {status}", status=status, code=f"http_{status}")
    code = str(error.get("code") or f"http_{status}")
    fields = error.get("fields")
    message = str(error.get("message") or code)
    return _rebuild(message, status, code, fields if isinstance(fields, list) else [])
