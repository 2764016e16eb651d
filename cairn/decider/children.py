"""Child runs: a task that runs another workflow. Names and limits only; pure.

A child run's id and its correlation id derive from the parent execution (run, node,
visit, attempt), so a decision replayed from the history names the same child, and
starting it twice is starting it once.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from cairn.model.definition import ChildRun

# Children of children...: a workflow that (through newer versions) starts itself would
# otherwise never end.
MAX_DEPTH = 8

_CHILD_IDS = uuid.UUID("0f4c0c2e-7f2a-4c55-9d7e-2f1c6a0b9e11")


def correlation_id(run_id: str, node: str, iteration: int, attempt: int) -> str:
    return f"{run_id}/{node}#{iteration}.{attempt}"


def child_run_id(run_id: str, node: str, iteration: int, attempt: int) -> str:
    return str(uuid.uuid5(_CHILD_IDS, correlation_id(run_id, node, iteration, attempt)))


def picked(fields: tuple[str, ...] | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` restricted to ``fields`` (all of them if None; absent ones skipped)."""
    if fields is None:
        return dict(values)
    return {name: values[name] for name in fields if name in values}


__all__ = ["MAX_DEPTH", "ChildRun", "child_run_id", "correlation_id", "picked"]
