"""What endpoints are given: the process's runtime, and checks on what a request says."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from cairn.errors import InvalidInput
from cairn.model.payloads import storable_text
from cairn.runtime import Runtime


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


Runtime_ = Annotated[Runtime, Depends(runtime_of)]


def storable(value: str | None, what: str) -> str | None:
    """``value`` if PostgreSQL can store it as text (query strings and headers may carry
    a NUL byte, which no column takes), else :class:`InvalidInput` naming ``what``."""
    if value is not None and not storable_text(value):
        raise InvalidInput(f"{what}: contains a NUL character or text that is not valid Unicode")
    return value
