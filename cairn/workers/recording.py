"""Which recorded calls the code running now belongs to: set around a ``record: http``
handler (:func:`recording`), cleared while a call that is recorded another way is sent
(:func:`suspended`). A context variable: each thread and each task sees its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.workers.models import ModelCalls

current: ContextVar[ModelCalls | None] = ContextVar("cairn_recorded_calls", default=None)


@contextmanager
def recording(calls: ModelCalls | None, install: bool = True) -> Iterator[None]:
    """Record (or, in a replay, answer) the HTTP the block sends; a no-op for None."""
    if calls is None:
        yield
        return
    if install:
        from cairn.workers.http_record import install as patch  # noqa: PLC0415

        patch()
    token = current.set(calls)
    try:
        yield
    finally:
        current.reset(token)


@contextmanager
def suspended() -> Iterator[None]:
    """HTTP that is recorded another way (a ``ctx.model`` call's own request): sent as is."""
    token = current.set(None)
    try:
        yield
    finally:
        current.reset(token)
