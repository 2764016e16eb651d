"""A dependency's circuit as the fleet knows it (the breaker: :mod:`cairn.engine.circuits`;
its state: :mod:`cairn.lease.circuits`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Change(StrEnum):
    """What a reported outcome did to its dependency's circuit."""

    OPENED = "opened"  # the failure that made it ``failures`` in a row
    REOPENED = "reopened"  # the probe failed: open for another ``open_for``
    CLOSED = "closed"  # a success while it was open: the dependency is back


@dataclass(frozen=True)
class CircuitReport:
    """A circuit that is not plainly closed: open (until ``open_until``, seconds since
    the epoch) or half-open (past it, waiting for a probe's outcome), or closed with
    failures counted towards opening it."""

    dependency: str
    state: str  # "open", "half_open" or "closed"
    failures: int  # runs failed in a row (closed), or since it first opened
    opened_at: float | None = None
    open_until: float | None = None
    opens: int = 0  # how many times it opened since it was last closed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CircuitLook:
    """A circuit as an execution finds it before it runs."""

    limit: int | None  # its pool's limit: None closed, 0 open, 1 half-open
    counting: bool  # failures are counted, or it is open: a success has something to undo
