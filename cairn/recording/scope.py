"""Which recorded calls the code running now belongs to: set around a ``record: http``
handler (:func:`cairn.recording.http.recording`), cleared while a call that is recorded
another way is sent (:func:`suspended`). A context variable: each thread and each task
sees its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.recording.calls import ModelCalls

current: ContextVar[ModelCalls | None] = ContextVar("cairn_recorded_calls", default=None)


@contextmanager
def suspended() -> Iterator[None]:
    """HTTP that is recorded another way (a ``ctx.model`` call's own request): sent as is."""
    token = current.set(None)
    try:
        yield
    finally:
        current.reset(token)
