"""What a run waits for a person about, as read: one execution waiting for a wait
node's signal or for an operator's decision about a held node. Only the standard library
here, so that a command line showing what waits (over HTTP) does not load the engine;
:mod:`cairn.engine.awaiting` finds them in a run's state."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# An operator's decision about a held node (see NodeHeld). The prefix is reserved: no
# wait node may declare a signal of that name.
RECOVERY_PREFIX = "recovery."
RECOVERY_SIGNALS = ("recovery.retry", "recovery.complete", "recovery.fail")


@dataclass(frozen=True)
class Awaiting:
    """One execution that waits for a person: a wait node's signal, or an operator's
    decision about a held node."""

    run_id: str
    node: str
    iteration: int
    phase: str
    signals: tuple[str, ...]  # what would answer it
    since: float  # epoch seconds
    times_out_at: float | None = None
    reason: str | None = None  # why a held node is held
    # Who may decide it, how many must agree, the votes so far (signal -> actors).
    approvers: tuple[str, ...] = ()
    quorum: int = 1
    votes: dict[str, list[str]] = field(default_factory=dict)
    # What the wait shows whoever decides it: the state fields it names, the last
    # messages, the budget spent (see :func:`cairn.engine.awaiting.context_of`); None:
    # it names none.
    context: dict[str, Any] | None = None

    @property
    def held(self) -> bool:
        return self.signals == RECOVERY_SIGNALS

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "signals": list(self.signals),
            "approvers": list(self.approvers),
            "held": self.held,
        }

    @classmethod
    def from_dict(cls, shown: dict[str, Any]) -> Awaiting:
        """An :class:`Awaiting` again, from :meth:`to_dict`'s JSON form."""
        fields = {name: value for name, value in shown.items() if name != "held"}
        fields["signals"] = tuple(fields.get("signals") or ())
        fields["approvers"] = tuple(fields.get("approvers") or ())
        return cls(**fields)
