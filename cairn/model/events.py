"""What happens to a run: the decider's inputs and the entries of the event log.

Events are facts with a timestamp ``at`` (seconds since the epoch) taken by whoever
records them — the decider never reads a clock. They are JSON on the wire:
:func:`event_to_dict` and :func:`event_from_dict` are the only (de)serialisers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from cairn.errors import EventRejected
from cairn.model.definition import ErrorClass


class Phase(StrEnum):
    """A node runs its handler (``run``) or, when the run is rolled back, its compensation."""

    RUN = "run"
    COMPENSATE = "compensate"


@dataclass(frozen=True)
class Event:
    at: float
    type: ClassVar[str] = "event"


@dataclass(frozen=True)
class RunStarted(Event):
    input: Mapping[str, Any] = field(default_factory=dict)
    # A child run: the parent execution it reports back to (run_id, node, iteration,
    # attempt, correlation_id, depth) and, if the parent's node has a budget, its part.
    parent: Mapping[str, Any] | None = None
    budget: Mapping[str, float] | None = None
    # Who started it (``<kind>:<name>``, the authenticated principal); None before 0019.
    actor: str | None = None
    type: ClassVar[str] = "run_started"


@dataclass(frozen=True)
class NodeSucceeded(Event):
    node: str = ""
    iteration: int = 1
    attempt: int = 1
    output: Mapping[str, Any] | None = None
    phase: Phase = Phase.RUN
    # What the handler added to the agent context: messages appended to the history,
    # and tool sessions created or updated (a session set to None is closed).
    messages: tuple[Mapping[str, Any], ...] = ()
    sessions: Mapping[str, Any] | None = None
    # What the execution spent (``ctx.charge``): counted against the run's budget.
    charges: Mapping[str, float] | None = None
    # Artifacts the handler put (``ctx.artifacts``): name -> reference (name, version,
    # sha256, size, uri); the content is in the object store, never in the log.
    artifacts: Mapping[str, Mapping[str, Any]] | None = None
    # Where the execution's time went, seconds: ``queue``, ``run`` and the handler's
    # ``ctx.timed`` kinds. Informational (``cairn sla``): the decider never reads it.
    timings: Mapping[str, float] | None = None
    # The build of the worker that ran it (docs/versions.md); None: not recorded.
    build: str | None = None
    # The handler's answers to ``ctx.patched``: patch id -> answer (cairn.model.patches).
    patches: Mapping[str, bool] | None = None
    type: ClassVar[str] = "node_succeeded"


@dataclass(frozen=True)
class NodeFailed(Event):
    node: str = ""
    iteration: int = 1
    attempt: int = 1
    error_class: ErrorClass = ErrorClass.PERMANENT
    message: str = ""
    phase: Phase = Phase.RUN
    charges: Mapping[str, float] | None = None
    timings: Mapping[str, float] | None = None
    # The server's word on when to try again (a 429's Retry-After): the retry's delay.
    retry_after_s: float | None = None
    build: str | None = None  # as NodeSucceeded's
    patches: Mapping[str, bool] | None = None  # as on NodeSucceeded
    type: ClassVar[str] = "node_failed"


@dataclass(frozen=True)
class NodeCancelled(Event):
    """A worker stopped a node at a safe point after being asked to."""

    node: str = ""
    iteration: int = 1
    attempt: int = 1
    phase: Phase = Phase.RUN
    charges: Mapping[str, float] | None = None
    type: ClassVar[str] = "node_cancelled"


@dataclass(frozen=True)
class NodeHeld(Event):
    """Recovery stopped short of running a node again: it lost its worker and either is
    irreversible (it may have taken effect) or keeps killing its workers. The execution
    waits for an operator's recovery signal."""

    node: str = ""
    iteration: int = 1
    attempt: int = 1
    phase: Phase = Phase.RUN
    reason: str = ""
    recoveries: int = 0
    type: ClassVar[str] = "node_held"


@dataclass(frozen=True)
class PlanInvalidated(Event):
    """The workflow's ``on_resume`` check found, when a recovered node was about to run
    again, that the plan no longer holds: the run goes to its re-planning node."""

    node: str = ""
    iteration: int = 1
    attempt: int = 1
    reason: str = ""
    type: ClassVar[str] = "plan_invalidated"


@dataclass(frozen=True)
class ChildFinished(Event):
    """A child run ended; its parent's node (``node`` visit ``iteration`` attempt
    ``attempt``) finishes with it. ``correlation_id`` is in both runs' histories."""

    node: str = ""
    iteration: int = 1
    attempt: int = 1
    child_run_id: str = ""
    correlation_id: str = ""
    status: str = ""
    output: Mapping[str, Any] | None = None
    reason: str | None = None
    charges: Mapping[str, float] | None = None
    type: ClassVar[str] = "child_finished"


@dataclass(frozen=True)
class SignalReceived(Event):
    """A decision from outside (a human's approval, a webhook).

    ``signal_id`` makes delivery idempotent. ``wait`` and ``iteration``, when given, name
    the exact wait being answered, so a late second decision is refused instead of
    answering a later visit of the same wait.
    """

    name: str = ""
    signal_id: str = ""
    payload: Mapping[str, Any] | None = None
    actor: str | None = None  # who decided: the authenticated principal, never the body
    wait: str | None = None
    iteration: int | None = None
    comment: str | None = None  # what the decider wrote beside it (kept, never read)
    # The actor's role when it sent it: what a wait's ``approvers: role:...`` is held to.
    role: str | None = None
    type: ClassVar[str] = "signal_received"


@dataclass(frozen=True)
class TimerFired(Event):
    timer_id: str = ""
    type: ClassVar[str] = "timer_fired"


@dataclass(frozen=True)
class CancelRequested(Event):
    reason: str = ""
    actor: str | None = None
    type: ClassVar[str] = "cancel_requested"


@dataclass(frozen=True)
class RollbackRequested(Event):
    """An operator undoes the run (confirmed): it stops as a cancel does, then every step
    that took effect is compensated, last first, and the run ends ``rolled_back`` — or,
    back to a checkpoint, only the steps after it are, and the run resumes from there."""

    reason: str = ""
    actor: str | None = None
    # Back to a checkpoint instead: undo only the steps after event ``to_seq`` and resume
    # from the run's state then (``rewind``, as the history had it).
    to_seq: int | None = None
    rewind: Mapping[str, Any] | None = None
    # Or one step's change only (its latest visit unless ``step_iteration`` is given).
    step: str | None = None
    step_iteration: int | None = None
    type: ClassVar[str] = "rollback_requested"


@dataclass(frozen=True)
class RunForked(Event):
    """A forked run's first event (``cairn fork --live``): it starts from its parent's
    state after event ``fork_seq`` (``state``, with ``patch`` — a JSON merge patch —
    applied to its vars), and resumes as a rollback to a checkpoint does: what was in
    progress there starts again, each as a new visit."""

    parent_run_id: str = ""
    fork_seq: int = 0
    state: Mapping[str, Any] = field(default_factory=dict)
    patch: Mapping[str, Any] | None = None
    actor: str | None = None  # who forked it
    type: ClassVar[str] = "run_forked"


@dataclass(frozen=True)
class RunMigrated(Event):
    """The run moved to another version of its workflow (``cairn runs migrate``): it
    leaves where it stood in ``from_version`` and enters ``node`` of ``to_version`` with
    ``vars`` as its state, as its ``mapping`` placed it (docs/versions.md). Or, with
    ``undoes`` (the seq of that migration), the migration rolled back: the run returns to
    ``rewind``, its state just before the migration, on ``to_version`` (the old one)."""

    from_version: int = 0
    to_version: int = 0
    node: str = ""
    vars: Mapping[str, Any] = field(default_factory=dict)
    mapping: str = ""  # the mapping's import path (module:function), for the history
    reason: str = ""
    actor: str | None = None  # who migrated it: the authenticated principal
    undoes: int | None = None
    rewind: Mapping[str, Any] | None = None
    type: ClassVar[str] = "run_migrated"


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        NodeSucceeded,
        NodeFailed,
        NodeCancelled,
        NodeHeld,
        PlanInvalidated,
        ChildFinished,
        SignalReceived,
        TimerFired,
        CancelRequested,
        RollbackRequested,
        RunForked,
        RunMigrated,
    )
}

_E = TypeVar("_E", bound=Event)


def stamped(event: _E, at: float) -> _E:
    """``event`` as it happened at ``at`` (for ``Orchestrator.apply``, whose transaction
    supplies the database's clock)."""
    return replace(event, at=at)


_ENUM_FIELDS: dict[str, type[StrEnum]] = {"phase": Phase, "error_class": ErrorClass}
# Fields added after events were first logged, written only when set: an event without
# them reads the same in code from before they existed (a rolling upgrade's old workers).
# Fields added since logs were first written: left out while unset, so that an event
# without them is written as it always was (the golden logs hold them to that).
_OMITTED_WHEN_UNSET = frozenset({"timings", "retry_after_s", "actor", "comment", "role", "build"})

# A step that asked no patch marker writes its result event as before patches existed.
_OMITTED_WHEN_UNSET = _OMITTED_WHEN_UNSET | {"patches"}


def event_to_dict(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = {"type": event.type}
    for item in fields(event):
        value = getattr(event, item.name)
        if value is None and item.name in _OMITTED_WHEN_UNSET:
            continue
        if isinstance(value, Mapping):
            value = dict(value)
        elif isinstance(value, tuple):
            value = [dict(entry) if isinstance(entry, Mapping) else entry for entry in value]
        data[item.name] = value
    return data


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """Rebuild an event; unknown types and fields are refused with :class:`EventRejected`."""
    kind = data.get("type")
    cls = EVENT_TYPES.get(str(kind))
    if cls is None:
        raise EventRejected(f"unknown event type {kind!r}; known: {sorted(EVENT_TYPES)}")
    names = {item.name for item in fields(cls)}
    unknown = set(data) - names - {"type"}
    if unknown:
        raise EventRejected(f"{kind} has no field(s) {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    for name in names & set(data):
        value = data[name]
        enum = _ENUM_FIELDS.get(name)
        if isinstance(value, list):
            value = tuple(value)
        try:
            kwargs[name] = enum(value) if enum is not None else value
        except ValueError as exc:
            raise EventRejected(f"{kind}.{name}: {exc}") from exc
    if "at" not in kwargs:
        raise EventRejected(f"{kind} needs 'at'")
    return cls(**kwargs)
