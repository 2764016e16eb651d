"""Circuit breaking: automatic recovery must not mask a systemic outage. A task that
declares ``dependency: payments`` has its transient failures counted fleet-wide, per
dependency; once ``failures`` runs in a row (no success between them) failed within
``window``, the dependency's circuit **opens**: new attempts against it wait — parked
like a waiter for a concurrency slot, holding no worker — instead of retrying into the
outage, so the count of attempts stays flat however many runs need it. After
``open_for`` it is **half-open**: one attempt, the probe, runs; its success closes the
circuit and wakes every waiter, its failure opens it again for another ``open_for``.

The circuit is a concurrency pool (``!circuit/<name>``, fleet-wide, not per namespace)
whose limit follows its state — none while closed, 0 while open, 1 while half-open — so
waiting, waking and a dead probe's slot (gone with its lease) are the slots' own (see
:mod:`cairn.engine.slots`). The state lives in Redis or in memory
(:mod:`cairn.limits.circuit_state`);
opening and closing are logged, counted, alerted and written to the history of the run
whose attempt opened or closed it.

Besides the dependencies a task declares, each of its rate limits' keys is one
(``rate:<namespace>/<key>=<value>``, the provider behind the bucket), with the default
thresholds: a provider failing every run's calls opens its key's circuit too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Protocol

from cairn.model.definition import Dependency


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


CIRCUIT_POOL = "!circuit/"  # a circuit's pool: fleet-wide, named as no namespace is
RATE_DEPENDENCY = "rate:"  # a rate limit's key, guarded like a declared dependency
# How many waiters a closed circuit's pool wakes at once: all of them, in practice.
WAKE_ALL = 100_000


class Circuits(Protocol):
    """The fleet's circuits, one per dependency name."""

    def look(self, names: Sequence[str]) -> Mapping[str, CircuitLook]:
        """Each circuit now: its pool's limit, and whether a success would change it."""
        ...

    def limits(self, names: Sequence[str]) -> Mapping[str, int | None]:
        """Each circuit's pool limit now: None closed, 0 open, 1 half-open."""
        ...

    def failed(self, dependency: Dependency, run_id: str) -> Change | None:
        """A run's attempt failed transiently against ``dependency``."""
        ...

    def succeeded(self, name: str) -> Change | None:
        """An attempt against ``name`` succeeded: nothing failed in a row any more."""
        ...

    def reports(self, limit: int = 1000) -> list[CircuitReport]:
        """Every circuit open, half-open, or closed with failures counted."""
        ...


def circuit_pool(name: str) -> str:
    return CIRCUIT_POOL + name


def rate_dependency(bucket: str) -> Dependency:
    """A rate limit's key as a dependency (``rate:<bucket>``): the provider behind it,
    with the default thresholds."""
    return Dependency(f"{RATE_DEPENDENCY}{bucket}")


def dependency_of(pool: str) -> str | None:
    """The dependency whose circuit ``pool`` is; None for a concurrency pool."""
    return pool.removeprefix(CIRCUIT_POOL) if pool.startswith(CIRCUIT_POOL) else None


def circuit_pools(
    dependencies: Sequence[Dependency], looks: Mapping[str, CircuitLook]
) -> list[tuple[str, int]]:
    """The pools of the circuits that are not closed, with their limits: an execution
    takes a slot of each before it runs (it parks on an open one)."""
    return [
        (circuit_pool(d.name), limit)
        for d in dependencies
        if (look := looks.get(d.name)) is not None and (limit := look.limit) is not None
    ]
