"""A run as a request may see it: only within the caller's namespace. A run of another
namespace is "not found", exactly like a missing one, so a key cannot even learn that
another tenant's run exists."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from cairn.errors import RunNotFound
from cairn.runtime import Runtime
from cairn.store.records import RunHead

RunId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="A run id, as submit returned it.",
    ),
]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or a wrong one."},
    403: {"description": "The key's role may not do this (docs/access.md)."},
    404: {"description": "No such run in this key's namespace."},
    422: {"description": "A field is missing, unknown or of the wrong type (named)."},
}


def status_url(run_id: str) -> str:
    return f"/v1/runs/{run_id}"


def visible(head: RunHead | None, run_id: str, namespace: str) -> RunHead:
    """``head``, if the run exists in ``namespace``; else :class:`RunNotFound`."""
    if head is None or head.namespace != namespace:
        raise RunNotFound(f"no run {run_id}")
    return head


def head_in(runtime: Runtime, run_id: str, namespace: str) -> RunHead:
    """The run's head (namespace, status, last seq) if the namespace may see it."""
    with runtime.store.reading() as tx:
        return visible(tx.run_head(run_id), run_id, namespace)
