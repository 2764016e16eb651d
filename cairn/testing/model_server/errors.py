"""The errors a provider answers with, in its own format: HTTP statuses, rate limits, an
exceeded context window."""

from __future__ import annotations

from typing import Any, cast

from cairn.testing.model_server.turns import Answer, json_answer, message_text
from cairn.testing.model_server.values import Fault, Provider, estimate_tokens

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_ERROR_MESSAGES = {
    400: "Bad request.",
    401: "Incorrect API key provided.",
    403: "You are not allowed to make this request.",
    404: "Not found.",
    408: "Request timed out.",
    409: "Conflict.",
    413: "Request too large.",
    422: "Unprocessable request.",
    429: "Rate limit reached for requests. Please try again later.",
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The service is temporarily unavailable. Please try again later.",
    504: "The request timed out.",
    529: "Overloaded",
}

_CONTEXT_WINDOW = 200_000

# --- errors -----------------------------------------------------------------------------


def error_answer(
    provider: Provider,
    status: int,
    message: str,
    headers: dict[str, str],
    *,
    code: str | None = None,
    param: str | None = None,
) -> Answer:
    if provider == "anthropic":
        kind = _ANTHROPIC_ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        payload: dict[str, Any] = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": headers.get("request-id"),
        }
    else:
        if status == 429:
            kind, code = "requests", code or "rate_limit_exceeded"
        elif status >= 500:
            kind = "server_error"
        else:
            kind = "invalid_request_error"
        payload = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return json_answer(status, payload, headers)


def fault_answer(
    fault: Fault, provider: Provider, body: dict[str, Any], headers: dict[str, str]
) -> Answer:
    headers = dict(headers)
    if fault.retry_after_s is not None:
        seconds = fault.retry_after_s
        headers["retry-after"] = str(int(seconds)) if seconds == int(seconds) else f"{seconds:g}"
        if provider == "openai":
            headers["x-should-retry"] = "true"
    if fault.context_length:
        # Over the window by construction, whatever the request's own size.
        tokens = _CONTEXT_WINDOW + estimate_tokens(message_text(body))
        if provider == "anthropic":
            message = f"prompt is too long: {tokens} tokens > {_CONTEXT_WINDOW} maximum"
            return error_answer(provider, 400, message, headers)
        message = (
            f"This model's maximum context length is {_CONTEXT_WINDOW} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
        )
        return error_answer(
            provider, 400, message, headers, code="context_length_exceeded", param="messages"
        )
    status = cast(int, fault.status)
    return error_answer(provider, status, _ERROR_MESSAGES.get(status, f"Error {status}."), headers)
