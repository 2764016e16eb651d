"""The run state the decider folds events into: plain data, JSON-serialisable.

Node, join, timer and compensation entries are frozen; the decider replaces them rather
than mutating them, so :meth:`RunState.copy` only needs to copy the containers and a
decision never changes the state it was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from cairn.model.events import Phase
from cairn.model.statuses import NodeStatus, RunStatus

# The snapshot format. 2 added the agent context (messages, sessions, artifacts); 3 the
# anomaly watch (``anomaly``, ``anomalies``: written only for workflows that watch).
# from_dict reads every older format, and keeps fields it does not know (from a newer
# cairn) in ``extra`` so that writing the state back loses nothing.
STATE_FORMAT = 3


class BranchOutcome(StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEFAULTED = "defaulted"  # failed or timed out, and contributes its declared default
    CANCELLED = "cancelled"


class TimerKind(StrEnum):
    RETRY = "retry"
    WAIT = "wait"
    NODE_TIMEOUT = "node_timeout"
    JOIN_TIMEOUT = "join_timeout"
    CANCEL = "cancel"
    COMPENSATION_RETRY = "compensation_retry"


@dataclass(frozen=True)
class NodeState:
    """The latest execution of one node: its key is (run, node, iteration)."""

    node: str
    iteration: int
    status: NodeStatus
    attempt: int = 1
    first_at: float = 0.0  # when attempt 1 was dispatched: the retry deadline counts from it
    error_class: str | None = None
    error: str | None = None
    # False for a parallel node: it "runs" while its branches do, but no worker executes
    # it, so nothing is ever dispatched, cancelled or awaited under its key.
    dispatched: bool = True
    # What this visit has spent so far, across its attempts (see ``ctx.charge``).
    spent: Mapping[str, float] | None = None
    # The child run executing this node, for a task that runs a child workflow.
    child: str | None = None
    # A wait's votes so far: per signal, the actors who sent it (towards its quorum).
    votes: Mapping[str, list[str]] | None = None

    @property
    def active(self) -> bool:
        """An execution a worker may be running now."""
        return self.dispatched and self.status in (NodeStatus.SCHEDULED, NodeStatus.RUNNING)


@dataclass(frozen=True)
class JoinState:
    node: str
    iteration: int
    outcomes: Mapping[str, BranchOutcome]
    outputs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    done: bool = False
    # Each branch's part of the budget, per unit, fixed when the branches start.
    allowances: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def with_outcome(
        self, branch: str, outcome: BranchOutcome, output: Mapping[str, Any] | None = None
    ) -> JoinState:
        outputs = dict(self.outputs)
        if output is not None:
            outputs[branch] = output
        return replace(self, outcomes={**self.outcomes, branch: outcome}, outputs=outputs)


@dataclass(frozen=True)
class TimerState:
    timer_id: str
    kind: TimerKind
    due_at: float
    node: str | None = None
    iteration: int | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class CompletedStep:
    """A succeeded execution whose node declares a compensation (the saga's undo stack)."""

    node: str
    iteration: int


@dataclass(frozen=True)
class Compensation:
    """Compensations still to run, last-completed first; ``current`` is in flight."""

    pending: tuple[CompletedStep, ...]
    final_status: RunStatus
    reason: str | None
    current: NodeState | None = None
    rewind: bool = False  # a rollback to a checkpoint: resume from it once all are undone


@dataclass(frozen=True)
class AnomalyTrack:
    """What the anomaly detectors remember between steps (see
    :mod:`cairn.decider.anomaly`): bounded histories, so that detection is a pure
    function of the state and replaying a history detects exactly the same."""

    steps: int = 0  # moves observed: the clock of the oscillation window
    # The last moves: (node entered, fingerprint of the state it was entered with).
    trail: tuple[tuple[str, str], ...] = ()
    # Consecutive moves that left the fingerprint unchanged, and whether a node came
    # round again among the moves at that fingerprint (``nodes``).
    streak: int = 0
    nodes: tuple[str, ...] = ()
    looped: bool = False
    tools: tuple[str, ...] = ()  # the last tool calls, "name arguments"
    # Per watched field: (step, value) each time it changed, within the window.
    values: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    # Interventions made so far, per anomaly kind (never cleared: once per run).
    interventions: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "trail": [list(entry) for entry in self.trail],
            "streak": self.streak,
            "nodes": list(self.nodes),
            "looped": self.looped,
            "tools": list(self.tools),
            "values": {name: [list(v) for v in seen] for name, seen in self.values.items()},
            "interventions": dict(self.interventions),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnomalyTrack:
        return cls(
            steps=data.get("steps", 0),
            trail=tuple((node, digest) for node, digest in data.get("trail", [])),
            streak=data.get("streak", 0),
            nodes=tuple(data.get("nodes", [])),
            looped=data.get("looped", False),
            tools=tuple(data.get("tools", [])),
            values={
                name: tuple((step, value) for step, value in seen)
                for name, seen in data.get("values", {}).items()
            },
            interventions=dict(data.get("interventions", {})),
        )


@dataclass
class RunState:
    """Everything the decider knows of a run: its status, ``vars`` (the state handlers
    read and return into), the agent context (messages, sessions, artifacts), its nodes,
    visits, joins, timers, compensations and spending. Rebuilt from the event log."""

    run_id: str
    workflow: str
    version: int
    status: RunStatus = RunStatus.PENDING
    vars: dict[str, Any] = field(default_factory=dict)
    # The agent context: the ordered message history, tool sessions (cursors, page
    # positions, session handles; never raw secrets) and artifact references.
    messages: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, NodeState] = field(default_factory=dict)
    visits: dict[str, int] = field(default_factory=dict)
    joins: dict[str, JoinState] = field(default_factory=dict)
    timers: dict[str, TimerState] = field(default_factory=dict)
    compensable: list[CompletedStep] = field(default_factory=list)
    compensation: Compensation | None = None
    signals_seen: list[str] = field(default_factory=list)
    cancel: dict[str, Any] | None = None
    reason: str | None = None
    # What the run has spent, per budget unit, by every execution whose result counted.
    spent: dict[str, float] = field(default_factory=dict)
    # Limits given by a parent run (its node's part of its budget), on top of the
    # definition's own.
    budget: dict[str, float] | None = None
    # For a child run: the parent execution it reports to (run_id, node, iteration,
    # attempt, correlation_id, depth).
    parent: dict[str, Any] | None = None
    steps: int = 0
    started_at: float | None = None
    updated_at: float | None = None
    # The anomaly detectors' memory (None until a watching workflow's run first moves),
    # and every anomaly detected, with what was done and the scene (JSON data).
    anomaly: AnomalyTrack | None = None
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    # Signals kept for waits that had not opened yet (accept_early): wait node -> the
    # signal's event data, applied when the wait opens.
    early: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The run's answers to ``ctx.patched``: patch id -> answer, the first one given
    # (cairn.model.patches). Written only once there is one.
    patches: dict[str, bool] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> RunState:
        """A copy whose collections may be changed without changing this one."""
        return replace(
            self,
            vars=dict(self.vars),
            messages=list(self.messages),
            sessions=dict(self.sessions),
            artifacts=dict(self.artifacts),
            nodes=dict(self.nodes),
            visits=dict(self.visits),
            joins=dict(self.joins),
            timers=dict(self.timers),
            compensable=list(self.compensable),
            signals_seen=list(self.signals_seen),
            cancel=dict(self.cancel) if self.cancel is not None else None,
            spent=dict(self.spent),
            anomalies=list(self.anomalies),
            early=dict(self.early),
            patches=dict(self.patches),
        )

    @property
    def active_nodes(self) -> list[NodeState]:
        """Executions a worker may be running now."""
        return [state for state in self.nodes.values() if state.active]

    @property
    def waits(self) -> list[NodeState]:
        """The waits open now (two parallel branches may wait at once)."""
        return [s for s in self.nodes.values() if s.status is NodeStatus.WAITING]

    @property
    def waiting_on(self) -> NodeState | None:
        """The first wait open now (see :attr:`waits` for every one)."""
        return next(iter(self.waits), None)

    @property
    def running(self) -> list[tuple[str, int, str]]:
        """Executions a worker may be running now, the compensation in progress included,
        as (node, iteration, phase): what their leases and heartbeats are keyed by."""
        running = [(s.node, s.iteration, Phase.RUN.value) for s in self.active_nodes]
        current = self.compensation.current if self.compensation else None
        if current is not None and current.active:
            running.append((current.node, current.iteration, Phase.COMPENSATE.value))
        return running

    @property
    def held(self) -> list[tuple[NodeState, Phase]]:
        """Executions waiting for an operator's recovery decision, with their phase."""
        held = [(s, Phase.RUN) for s in self.nodes.values() if s.status is NodeStatus.HELD]
        current = self.compensation.current if self.compensation else None
        if current is not None and current.status is NodeStatus.HELD:
            held.append((current, Phase.COMPENSATE))
        return held

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (written on every step: kept cheaper than dataclasses.asdict).

        It shares this state's containers (vars, messages, ...): serialise it, don't
        change it."""
        compensation = self.compensation
        watch: dict[str, Any] = {}
        if self.anomaly is not None:  # absent for the workflows that do not watch
            watch["anomaly"] = self.anomaly.to_dict()
        for name in ("anomalies", "early", "patches"):  # written only once there is one
            if getattr(self, name):
                watch[name] = getattr(self, name)
        return {
            **self.extra,
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "status": self.status.value,
            "vars": self.vars,
            "messages": self.messages,
            "sessions": self.sessions,
            "artifacts": self.artifacts,
            "nodes": {name: _plain(node) for name, node in self.nodes.items()},
            "visits": self.visits,
            "joins": {
                name: {
                    "node": join.node,
                    "iteration": join.iteration,
                    "outcomes": {b: o.value for b, o in join.outcomes.items()},
                    "outputs": dict(join.outputs),
                    "done": join.done,
                    "allowances": dict(join.allowances),
                }
                for name, join in self.joins.items()
            },
            "timers": {name: _plain(timer) for name, timer in self.timers.items()},
            "compensable": [_plain(step) for step in self.compensable],
            "compensation": None
            if compensation is None
            else {
                "pending": [_plain(step) for step in compensation.pending],
                "final_status": compensation.final_status.value,
                "reason": compensation.reason,
                "current": None if compensation.current is None else _plain(compensation.current),
                "rewind": compensation.rewind,
            },
            "signals_seen": self.signals_seen,
            "cancel": self.cancel,
            "reason": self.reason,
            "spent": self.spent,
            "budget": self.budget,
            "parent": self.parent,
            "steps": self.steps,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            **watch,
            "format": STATE_FORMAT,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunState:
        """Read a state written by this or any other cairn version (see STATE_FORMAT)."""
        comp = data.get("compensation")
        known = {f.name for f in fields(cls)} | {"format"}
        return cls(
            run_id=data["run_id"],
            workflow=data["workflow"],
            version=data["version"],
            status=RunStatus(data["status"]),
            vars=dict(data.get("vars", {})),
            messages=list(data.get("messages", [])),
            sessions=dict(data.get("sessions", {})),
            artifacts=dict(data.get("artifacts", {})),
            nodes={k: _node(v) for k, v in data.get("nodes", {}).items()},
            visits=dict(data.get("visits", {})),
            joins={k: _join(v) for k, v in data.get("joins", {}).items()},
            timers={k: _timer(v) for k, v in data.get("timers", {}).items()},
            compensable=[CompletedStep(**step) for step in data.get("compensable", [])],
            compensation=None
            if comp is None
            else Compensation(
                pending=tuple(CompletedStep(**step) for step in comp["pending"]),
                final_status=RunStatus(comp["final_status"]),
                reason=comp.get("reason"),
                current=_node(comp["current"]) if comp.get("current") else None,
                rewind=comp.get("rewind", False),
            ),
            signals_seen=list(data.get("signals_seen", [])),
            cancel=data.get("cancel"),
            reason=data.get("reason"),
            spent=dict(data.get("spent", {})),
            budget=data.get("budget"),
            parent=data.get("parent"),
            steps=data.get("steps", 0),
            started_at=data.get("started_at"),
            updated_at=data.get("updated_at"),
            anomaly=(
                AnomalyTrack.from_dict(data["anomaly"]) if data.get("anomaly") is not None else None
            ),
            anomalies=list(data.get("anomalies", [])),
            early=dict(data.get("early", {})),
            patches=dict(data.get("patches", {})),
            extra={key: value for key, value in data.items() if key not in known},
        )


def plain(entry: NodeState | TimerState | CompletedStep) -> dict[str, Any]:
    """A node's, timer's or completed step's entry as the state's JSON holds it."""
    return _plain(entry)


def _plain(entry: Any) -> dict[str, Any]:
    """A flat frozen entry (node, timer, step) as a dict, enums as their values, unset
    optional fields left out."""
    return {
        name: (value.value if isinstance(value, StrEnum) else value)
        for name, value in entry.__dict__.items()
        if value is not None  # every optional field defaults to None: keep snapshots small
    }


def _node(data: Mapping[str, Any]) -> NodeState:
    return NodeState(**{**data, "status": NodeStatus(data["status"])})


def _join(data: Mapping[str, Any]) -> JoinState:
    return JoinState(
        node=data["node"],
        iteration=data["iteration"],
        outcomes={k: BranchOutcome(v) for k, v in data["outcomes"].items()},
        outputs=dict(data.get("outputs", {})),
        done=data.get("done", False),
        allowances=dict(data.get("allowances", {})),
    )


def _timer(data: Mapping[str, Any]) -> TimerState:
    return TimerState(**{**data, "kind": TimerKind(data["kind"])})


__all__ = [
    "AnomalyTrack",
    "plain",
    "BranchOutcome",
    "CompletedStep",
    "Compensation",
    "JoinState",
    "NodeState",
    "Phase",
    "RunState",
    "TimerKind",
    "TimerState",
]
