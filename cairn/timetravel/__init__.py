"""Time travel, read-only: a run's timeline (``cairn history``, ``state --at``, ``diff``,
``bisect``), replaying its handlers without touching the world (``cairn replay``), and
forks (``cairn fork``). See ``docs/time-travel.md``. Effects a replay meets are answered
from the ledger, or by a stub registered here (``@replay_stub``), never by the world.
"""

from cairn.timetravel.ledger import ReplayRefused, StubRequest, register_stub, replay_stub
from cairn.timetravel.model_stubs import ModelStubRequest

__all__ = ["ModelStubRequest", "ReplayRefused", "StubRequest", "register_stub", "replay_stub"]
