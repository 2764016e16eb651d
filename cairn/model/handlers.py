"""The shapes a handler is written against: the run state it gets and returns, JSON, and
a guard. (The handler's own type, ``cairn.Handler``, sits beside the step context it
takes, in :mod:`cairn.workers.context`.)

Kept apart from the step context so that annotating with them costs nothing at import:
these are plain aliases.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

State: TypeAlias = dict[str, Any]
"""The run state a handler is given (its private copy) and the mapping it returns to be
merged into it. Values are JSON, read by the handler's own knowledge of its workflow:
``Any`` here keeps ``state["origin"]`` usable without a cast at every read."""

Message: TypeAlias = dict[str, Any]
"""One entry of the agent's history, ``ctx.messages`` (a provider's chat format: ``{"role":
"user", "content": "..."}``, tool calls and all)."""

JSONValue: TypeAlias = (
    bool | int | float | str | Sequence["JSONValue"] | Mapping[str, "JSONValue"] | None
)
"""What may be recorded and returned again from the record (an effect's result, a model
call's answer): JSON data. Mapping and Sequence, not dict and list, so that a
``dict[str, str]`` is one (they are covariant); a tuple comes back as a list."""

Guard: TypeAlias = Callable[[State], bool | str]
"""A guard of a ``branch``: the state after the handler's output is merged -> its label."""


def is_async(handler: Callable[..., Any]) -> bool:
    """Does calling ``handler`` make a coroutine (an ``async def``, a partial of one, an
    object whose ``__call__`` is one)?"""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - a callable object's method
    )
