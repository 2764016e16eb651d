"""What endpoints are given: the process's runtime and the caller's namespace."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cairn.errors import InvalidInput
from cairn.model.payloads import storable_text
from cairn.runtime import Runtime

# Declared for the OpenAPI document (clients and schemathesis learn the scheme from it);
# the key itself is checked by ApiKeys, which answers in the API's own error shape.
bearer = HTTPBearer(auto_error=False, description="An API key, scoped to one namespace.")


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def namespace_of(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> str:
    """The namespace of the request's API key (401 without a valid one). Async: a few
    hashes, no I/O, so it runs on the event loop instead of taking a pool thread."""
    namespace: str = request.app.state.keys.namespace_of(request.headers.get("authorization"))
    return namespace


Namespace = Annotated[str, Depends(namespace_of)]


def storable(value: str | None, what: str) -> str | None:
    """``value`` if PostgreSQL can store it as text (query strings and headers may carry
    a NUL byte, which no column takes), else :class:`InvalidInput` naming ``what``."""
    if value is not None and not storable_text(value):
        raise InvalidInput(f"{what}: contains a NUL character or text that is not valid Unicode")
    return value
