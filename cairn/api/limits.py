"""Request bodies: JSON only (a workflow definition may be YAML too, a console page's form
is form-encoded), well-formed, every object's keys once, and no larger than
``CAIRN_API_MAX_BODY_BYTES``.

Checked before the app sees the body: a declared ``Content-Length`` over the limit is
refused at once, unread, and a body without one (chunked) is counted as it arrives and
refused as soon as it passes the limit, so no more than the limit is ever held. A body
within the limit is read here and handed on whole, which is cheap at this size and makes
the limit hold whatever the endpoint does with its body. A body that is not JSON, or
that names a key twice in one object (``{"payload": 1, "payload": 2}``: which one
counts is the parser's whim, and two parsers may disagree), is refused with 400 and
nothing written.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairn.api.errors import error_body

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# Where a body may be YAML too: a workflow definition, as its file holds it (the endpoint
# parses it, refusing a key named twice as it refuses a JSON body's).
YAML_BODIES = frozenset({"/v1/workflows"})
YAML_TYPES = frozenset({b"application/yaml", b"application/x-yaml", b"text/yaml"})
# The console's pages post HTML forms (docs/console.md): form-encoded, under /console only.
FORM_PREFIX = "/console/"
FORM_TYPE = b"application/x-www-form-urlencoded"


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {key.lower(): value for key, value in scope["headers"]}
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _refuse(send, 400, "bad_request", "Content-Length is not a number")
                return
            if int(declared) > self.max_bytes:
                await self._too_large(send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        yaml = content_type in YAML_TYPES and scope.get("path") in YAML_BODIES
        form = content_type == FORM_TYPE and str(scope.get("path", "")).startswith(FORM_PREFIX)
        if body and content_type != b"application/json" and not (yaml or form):
            await _refuse(
                send,
                415,
                "unsupported_media_type",
                "request bodies are JSON: send Content-Type: application/json",
            )
            return
        malformed = _malformed(body) if body and not (yaml or form) else None
        if malformed is not None:
            await _refuse(send, 400, "bad_request", malformed)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as usual

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await _refuse(
            send,
            413,
            "payload_too_large",
            f"the request body is larger than {self.max_bytes} bytes",
        )


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),  # the rest of a refused body is not read
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Duplicated(ValueError):
    pass


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Duplicated(key)
        found[key] = value
    return found


def _malformed(body: bytes) -> str | None:
    """Why ``body`` is not a JSON document with each object's keys once (None: it is)."""
    try:
        json.loads(body, object_pairs_hook=_once)
    except _Duplicated as twice:
        return f"the body names the key {str(twice)!r} twice in one object"
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return f"the body is not JSON: {exc}"
    return None
