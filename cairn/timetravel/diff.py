"""What changed between two states of a run, path by path (``cairn diff``, and the
changes ``cairn bisect`` and ``cairn replay`` report)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from cairn.model.state import RunState


class _Absent(Enum):
    ABSENT = "absent"


ABSENT = _Absent.ABSENT  # a side of a change where the path does not exist
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


@dataclass(frozen=True)
class Change:
    path: str
    old: Any = ABSENT
    new: Any = ABSENT

    @property
    def kind(self) -> str:
        if self.old is ABSENT:
            return "added"
        return "removed" if self.new is ABSENT else "changed"

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": self.path, "change": self.kind}
        if self.old is not ABSENT:
            entry["old"] = self.old
        if self.new is not ABSENT:
            entry["new"] = self.new
        return entry


def diff_values(old: Any, new: Any, path: str = "") -> list[Change]:
    """What differs between two JSON values, path by path: into dicts by key and lists
    by index (an appended message is one ``added`` entry, not a changed list)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        changes = []
        for key in [*old, *(key for key in new if key not in old)]:
            where = _path(path, key)
            if key not in new:
                changes.append(Change(where, old=old[key]))
            elif key not in old:
                changes.append(Change(where, new=new[key]))
            else:
                changes.extend(diff_values(old[key], new[key], where))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        changes = []
        for index in range(max(len(old), len(new))):
            where = f"{path}[{index}]"
            if index >= len(new):
                changes.append(Change(where, old=old[index]))
            elif index >= len(old):
                changes.append(Change(where, new=new[index]))
            else:
                changes.extend(diff_values(old[index], new[index], where))
        return changes
    # 1 == 1.0 == True in Python, not in the state's JSON: compare types too.
    if type(old) is not type(new) or old != new:
        return [Change(path, old, new)]
    return []


def diff_states(old: RunState, new: RunState) -> list[Change]:
    return diff_values(plain(old), plain(new))


def plain(state: RunState) -> dict[str, Any]:
    """The state as JSON data of its own (``to_dict`` shares the state's containers)."""
    copied: dict[str, Any] = json.loads(json.dumps(state.to_dict()))
    return copied


def _path(path: str, key: Any) -> str:
    if isinstance(key, str) and _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"
