"""What an execution came to, and what a decision writes: the values that cross from
the worker to the engine and from the engine to the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cairn.model.events import Event
from cairn.model.keys import ExecutionKey
from cairn.model.statuses import NodeStatus, RunStatus


@dataclass(frozen=True)
class NodeOutcome:
    """The result of one execution, as the worker reports it. The event's time is
    replaced by the database's clock when it is recorded."""

    event: Event
    status: NodeStatus
    result: Mapping[str, Any] | None = None
    error_class: str | None = None
    error: str | None = None
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunWrite:
    """The run row as one step leaves it, typed as :class:`cairn.store.records.RunRecord`
    reads it back. The last three are written only when the step sets them (a run's end,
    a snapshot): None leaves the row's value as it was. ``reason`` and ``state_json`` are
    always written, None included."""

    status: RunStatus
    last_seq: int  # the step's event's seq
    updated_at: datetime
    current: list[str]  # the active nodes, as "node#iteration"
    reason: str | None
    # The state as JSON text, kept on the row while it fits the cache (None: it did
    # not, and the row holds no state).
    state_json: str | None
    finished_at: datetime | None = None
    snapshot_seq: int | None = None
    snapshot_at: datetime | None = None

    def columns(self) -> dict[str, Any]:
        """The ``runs`` columns this write sets, by name; those left out are not written.
        The state is its JSON text, for each backend to bind as its column takes it. (The
        one-statement steps bind the fields straight into their constant SQL, where
        ``coalesce`` keeps a column the write leaves as None.)"""
        columns: dict[str, Any] = {
            "status": self.status.value,
            "last_seq": self.last_seq,
            "updated_at": self.updated_at,
            "current": self.current,
            "reason": self.reason,
            "state": self.state_json,
        }
        if self.finished_at is not None:
            columns["finished_at"] = self.finished_at
        if self.snapshot_seq is not None:
            columns["snapshot_seq"] = self.snapshot_seq
        if self.snapshot_at is not None:
            columns["snapshot_at"] = self.snapshot_at
        return columns


@dataclass(frozen=True)
class StepWrites:
    """What one decision writes, whichever path writes it: the run row as it leaves it
    (``run``; its ``last_seq`` is the event's seq), the event and what the decision did,
    a snapshot when due (format, codec, body), the sent-marks this process owes, each
    dispatch as (execution key, attempt, message payload), and the run's timers armed
    (id, due at) and disarmed (ids) — disjoint, the decision's net effect on them."""

    run: RunWrite
    event: Mapping[str, Any]
    outcome: Mapping[str, Any]
    sent: Sequence[int]
    dispatches: Sequence[tuple[ExecutionKey, int, Mapping[str, Any]]]
    snapshot: tuple[int, str, bytes] | None = None
    armed: Sequence[tuple[str, float]] = ()
    disarmed: Sequence[str] = ()

    @property
    def seq(self) -> int:
        return self.run.last_seq

    @property
    def at(self) -> float:
        return float(self.event["at"])


@dataclass(frozen=True)
class StepResult:
    """A worker's result for one execution and the step it leads to, as a completion
    writes it: the execution (``key``, ``attempt``) and the claim it ran under
    (``fence``), the run's seq the step was planned on (``known_seq``), the result's
    columns, and the step's writes."""

    key: ExecutionKey
    attempt: int
    fence: int
    known_seq: int
    result: Mapping[str, Any]
    writes: StepWrites


@dataclass(frozen=True)
class BranchMerge:
    """A branch's success as it merges onto its run as the run is by then
    (:mod:`cairn.engine.merges`): the operations on the cached state (``set`` a path to a
    value, ``drop`` a path, ``add`` an integer to one), the executions it leaves the run's
    ``current``, and what must hold of the run it merges onto — every step since
    ``known_seq`` a merge too, its join (``join``) undecided by it: between ``at_least``
    and ``at_most`` of the branch's siblings with an outcome in ``counted``; no snapshot
    due (``snapshot_every`` events, ``snapshot_every_s`` seconds); and the state, merged,
    within what the row caches (``cache_bytes``)."""

    ops: Sequence[Mapping[str, Any]]
    left: Sequence[str]
    join: str
    counted: Sequence[str]
    at_least: int
    at_most: int
    snapshot_every: int
    snapshot_every_s: float
    cache_bytes: int


@dataclass(frozen=True, slots=True)
class Merged:
    """Where a branch's merged step left its run: the seq it took, the executions still
    running, and the state, siblings merged before it included (None: none was since the
    seq it was planned on — the state is the one planned)."""

    seq: int
    current: list[str]
    state: dict[str, Any] | None
