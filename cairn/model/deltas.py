"""What changed between two JSON objects, as little as says it: the items appended to a
list that grew at its end, and the other fields that changed (or went). A long
execution's checkpoints are stored this way (:mod:`cairn.workers.checkpoints`): the
100th checkpoint of an agent loop holds its newest messages, not its history again.

Pure: :func:`delta` and :func:`fold` are inverses — ``fold(before, delta(before,
after)) == after`` for any two JSON objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

APPEND = "append"  # field -> the items appended to its list
SET = "set"  # field -> its new value
DROP = "drop"  # the fields that went


def delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What turns ``before`` into ``after`` (both JSON objects)."""
    appended: dict[str, list[Any]] = {}
    changed: dict[str, Any] = {}
    for field, value in after.items():
        if field not in before:
            changed[field] = value
            continue
        old = before[field]
        if isinstance(old, list) and isinstance(value, list) and _extends(old, value):
            if len(value) > len(old):
                appended[field] = value[len(old) :]
        elif type(old) is not type(value) or old != value:  # 1 == True, not in JSON
            changed[field] = value
    found: dict[str, Any] = {}
    if appended:
        found[APPEND] = appended
    if changed:
        found[SET] = changed
    dropped = [field for field in before if field not in after]
    if dropped:
        found[DROP] = dropped
    return found


def fold(before: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """``before`` with ``change`` (a :func:`delta`) applied: a new object; lists that
    grew are new lists."""
    after = dict(before)
    for field, items in (change.get(APPEND) or {}).items():
        after[field] = [*after.get(field, []), *items]
    after.update(change.get(SET) or {})
    for field in change.get(DROP) or ():
        after.pop(field, None)
    return after


def _extends(old: Sequence[Any], new: Sequence[Any]) -> bool:
    """Whether ``new`` is ``old`` with items appended (compared in C, item by item)."""
    return len(new) >= len(old) and new[: len(old)] == old


__all__ = ["delta", "fold"]
