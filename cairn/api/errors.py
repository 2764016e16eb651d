"""Errors as JSON: ``{"error": {"code", "message"}}``, with a stable code.

The code is the one the engine's :class:`~cairn.errors.CairnError` carries (clients
match on it; the message is for people); the HTTP status is chosen here, by error type.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cairn.access import Forbidden, Unauthorized
from cairn.access.keys import KeyNotFound, PrincipalExists, PrincipalNotFound
from cairn.errors import (
    ArtifactNotFound,
    CairnError,
    CodeUnavailable,
    ConfigError,
    ConfirmationRequired,
    EffectNotFound,
    EffectNotOpen,
    EventRejected,
    FlowConflict,
    IdempotencyConflict,
    IllegalTransition,
    InvalidInput,
    NotPaused,
    RunNotFound,
    ScheduleExists,
    ScheduleNotFound,
    SelectionChanged,
    ShareNotFound,
    StaleTransition,
    StoreError,
    StoreRefused,
    StoreUnavailable,
    UnknownWorkflow,
    VersionConflict,
    WorkflowDefinitionError,
)

log = logging.getLogger(__name__)


class PayloadTooLarge(CairnError):
    code = "payload_too_large"


class UnsupportedMediaType(CairnError):
    code = "unsupported_media_type"


# Most specific first: the first isinstance match decides.
STATUS_BY_ERROR: tuple[tuple[type[CairnError], int], ...] = (
    (Unauthorized, 401),
    (Forbidden, 403),
    (RunNotFound, 404),
    (UnknownWorkflow, 404),
    (ShareNotFound, 404),
    (ArtifactNotFound, 404),
    (EffectNotFound, 404),
    (NotPaused, 404),
    (ScheduleNotFound, 404),
    (KeyNotFound, 404),
    (PrincipalNotFound, 404),
    (PrincipalExists, 409),
    (PayloadTooLarge, 413),
    (UnsupportedMediaType, 415),
    (InvalidInput, 422),
    (WorkflowDefinitionError, 422),  # every fault listed (``faults``)
    # A value the database refused (out of range, too long): the request's fault, as far
    # as the client can tell; the field checks should have caught it first.
    (StoreRefused, 422),
    (StoreUnavailable, 503),
    (IdempotencyConflict, 409),
    (ScheduleExists, 409),
    (VersionConflict, 409),  # a changed definition under a registered version
    (FlowConflict, 409),  # a debounce key that holds another workflow's pending run
    (EventRejected, 409),  # a signal the run cannot take: the run's state conflicts
    (IllegalTransition, 409),  # cancelling a finished run
    (ConfirmationRequired, 409),
    (EffectNotOpen, 409),  # resolved already, or never flagged
    (SelectionChanged, 409),  # a bulk action's runs are not those its dry run counted
    (CodeUnavailable, 409),  # this process cannot import the handlers a replay runs
    # The run moved under the request (a guarded write found nothing to move): retry.
    (StaleTransition, 409),
    # What is left of the store's errors is cairn's own inconsistency, not the request's.
    (StoreError, 500),
    (ConfigError, 500),
)

PUBLIC_MESSAGES: dict[type[CairnError], str] = {
    StoreUnavailable: "the database cannot be reached; try again",
    StoreRefused: "a value in the request cannot be stored",
    StoreError: "the database could not do what was asked; try again",
}

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
}


def field_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """pydantic's errors as the fields a refusal names: ``{"field", "message"}``."""
    return [
        {"field": ".".join(str(part) for part in err["loc"]), "message": err["msg"]}
        for err in errors
    ]


def fields_line(fields: Sequence[Mapping[str, str]]) -> str:
    """Those fields in one line, for a message: ``body.name: ...; body.role: ...``."""
    return "; ".join(f"{entry['field']}: {entry['message']}" for entry in fields)


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(error_body(code, message, **extra), status_code=status, headers=headers)


def status_of(exc: CairnError) -> int:
    for kind, status in STATUS_BY_ERROR:
        if isinstance(exc, kind):
            return status
    return 400  # refused on purpose, for a reason without a status of its own


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into the one error shape."""

    async def cairn_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, CairnError)
        status = status_of(exc)
        if status >= 500:
            log.error("request failed: %s", exc)
        # The database's own words stay in the log: they name hosts and columns.
        message = PUBLIC_MESSAGES.get(type(exc)) or str(exc)
        if isinstance(exc, WorkflowDefinitionError):
            return error_response(status, exc.code, message, faults=exc.to_dict()["faults"])
        return error_response(status, exc.code, message)

    async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        fields = field_errors(exc.errors())
        message = fields_line(fields) or "invalid request"
        return error_response(422, "validation_error", message, fields=fields)

    async def http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, str(exc.detail))

    async def internal(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "internal error")

    app.add_exception_handler(CairnError, cairn_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, internal)
