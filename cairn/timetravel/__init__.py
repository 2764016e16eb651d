"""Time travel, read-only: a run's timeline (``cairn history``, ``state --at``, ``diff``,
``bisect``), replaying its handlers without touching the world (``cairn replay``), and
forks (``cairn fork``). See ``docs/time-travel.md``. Effects a replay meets are answered
from the ledger, or by a stub registered here (``@replay_stub``), never by the world.

The names below resolve when first used (PEP 562): reading a timeline (``cairn state``)
must not load the replay's machinery — the worker's runner, effects and artifacts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "ModelStubRequest": "cairn.timetravel.model_stubs",
    "ReplayRefused": "cairn.timetravel.ledger",
    "StubRequest": "cairn.timetravel.ledger",
    "register_stub": "cairn.timetravel.ledger",
    "replay_stub": "cairn.timetravel.ledger",
}

__all__ = ["ModelStubRequest", "ReplayRefused", "StubRequest", "register_stub", "replay_stub"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cairn.timetravel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from cairn.timetravel.ledger import ReplayRefused, StubRequest, register_stub, replay_stub
    from cairn.timetravel.model_stubs import ModelStubRequest
