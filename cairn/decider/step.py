"""The decider's working copy of one decision (:class:`Step`) and what every part of
the decider shares: pseudo-nodes, transitions, timer ids, retry delays, and the small
moves (set a status through its transition table, arm a timer, stop an execution).

The rules themselves live in :mod:`cairn.decider.moves` (moving along the graph, a
node's result), :mod:`~cairn.decider.signal_received`, :mod:`~cairn.decider.timer_fired`,
:mod:`~cairn.decider.joins`, :mod:`~cairn.decider.stopping` (ending, cancelling,
compensating, rolling back) and :mod:`~cairn.decider.holds` (what waits for an operator);
:class:`Step` declares the moves they ask of one another.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cairn.errors import EventRejected, IllegalTransition, UnknownNode
from cairn.model.commands import ArmTimer, CancelNode, Command, DisarmTimer, SettleExecution
from cairn.model.definition import (
    AnyNode,
    ErrorClass,
    Jitter,
    RetryPolicy,
    WorkflowDefinition,
)
from cairn.model.events import NodeFailed, NodeSucceeded, Phase
from cairn.model.state import (
    Compensation,
    CompletedStep,
    NodeState,
    RunState,
    TimerKind,
    TimerState,
)
from cairn.model.statuses import NodeStatus, RunStatus, advance_node, advance_run

START = "(start)"
OPERATOR = "(operator)"  # who decides about a held node
REWIND = "(rewind)"  # where a rollback to a checkpoint resumes the run from
FORK = "(fork)"  # where a forked run resumes its parent's checkpoint from
DECISIONS_KEY = "decisions"  # state field where wait decisions (signal, payload, actor) land


def outcome_node(status: RunStatus) -> str:
    """The pseudo-node a transition leads to when it ends the run: ``"(failed)"``."""
    return f"({status.value})"


@dataclass(frozen=True)
class Transition:
    """One move along the workflow graph, as listed by ``cairn describe``."""

    source: str
    label: str
    target: str


def retry_delay_s(
    policy: RetryPolicy, run_id: str, node: str, iteration: int, attempt: int
) -> float:
    """Seconds to wait after failed ``attempt``: exponential backoff with full jitter.

    The jitter is a hash of the execution key rather than a random draw, so the decider
    stays deterministic (replaying a history re-derives the same delays) while runs that
    failed together still spread their retries apart.
    """
    ceiling = policy.ceiling(attempt).total_seconds()
    if policy.jitter is Jitter.NONE:
        return ceiling
    digest = hashlib.sha256(f"{run_id}:{node}:{iteration}:{attempt}".encode()).digest()
    return ceiling * (int.from_bytes(digest[:8], "big") / 2**64)


def timer_id(kind: TimerKind, node: str = "", iteration: int = 0, attempt: int = 0) -> str:
    return f"{kind.value}:{node}:{iteration}:{attempt}"


def label_of(value: object) -> str | None:
    """The edge label for a guard result or routing value (``True`` -> ``"true"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    return None


class Step:
    """The working copy of one decision: the state being changed and what was decided."""

    def __init__(self, definition: WorkflowDefinition, state: RunState, at: float) -> None:
        self.definition = definition
        self.state = state
        self.at = at
        self.commands: list[Command] = []
        self.transitions: list[Transition] = []
        # When the state this step resumes from last moved: the previous decision's time,
        # or an older checkpoint's when the step rewinds or forks to one.
        self.still_since: float | None = state.updated_at if state.steps else None

    # -- events -------------------------------------------------------------------------
    # -- helpers ------------------------------------------------------------------------

    def absorb_context(self, event: NodeSucceeded) -> None:
        """Keep what the handler added to the agent context: it is part of the checkpoint."""
        self.state.messages.extend(dict(message) for message in event.messages)
        for name, session in (event.sessions or {}).items():
            if session is None:
                self.state.sessions.pop(name, None)
            else:
                self.state.sessions[name] = session
        for name, ref in (event.artifacts or {}).items():
            # Branches of a fan-out may put the same name: the newest version stays,
            # whichever branch reports first.
            kept = self.state.artifacts.get(name)
            if kept is None or int(kept.get("version", 0)) <= int(ref.get("version", 0)):
                self.state.artifacts[name] = dict(ref)

    @property
    def moving(self) -> bool:
        return self.state.status in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)

    def known_node(self, node_id: str) -> AnyNode:
        node = self.definition.nodes.get(node_id)
        if node is None:
            raise UnknownNode(f"workflow {self.definition.key} has no node {node_id!r}")
        return node

    def current_execution(
        self, node_id: str, iteration: int, attempt: int
    ) -> tuple[NodeState, str | None]:
        current = self.state.nodes.get(node_id)
        if current is None:
            raise IllegalTransition(
                "node",
                f"{node_id}#{iteration}",
                "unscheduled",
                "finished",
                "this node was never dispatched in this run",
            )
        if not current.dispatched:
            raise EventRejected(
                f"{node_id} is a parallel node: no worker runs it, so it has no results"
            )
        key = (current.iteration, current.attempt)
        if (iteration, attempt) != key:
            return current, (
                f"stale: {node_id} visit {iteration} attempt {attempt}, but the "
                f"current execution is visit {key[0]} attempt {key[1]}"
            )
        if not current.active:
            return current, f"duplicate: {node_id} visit {iteration} is already {current.status}"
        return current, None

    def subject(self, current: NodeState) -> str:
        return f"{self.state.run_id}/{current.node}#{current.iteration}"

    def set_node(self, current: NodeState, status: NodeStatus, **changes: Any) -> NodeState:
        updated = self.moved(current, status, **changes)
        self.state.nodes[current.node] = updated
        return updated

    def moved(self, current: NodeState, status: NodeStatus, **changes: Any) -> NodeState:
        """``current`` in ``status``, if the node transition table allows it."""
        return replace(
            current, status=advance_node(self.subject(current), current.status, status), **changes
        )

    def set_compensation(self, current: NodeState) -> None:
        assert self.state.compensation is not None
        self.state.compensation = replace(self.state.compensation, current=current)

    def set_run(self, status: RunStatus) -> None:
        if self.state.status is not status:
            self.state.status = advance_run(self.state.run_id, self.state.status, status)

    def record_compensable(self, node: AnyNode, current: NodeState) -> None:
        if node.compensate is not None:
            self.state.compensable.append(CompletedStep(node.id, current.iteration))

    def stop_execution(self, current: NodeState, reason: str) -> None:
        if current.active:
            self.commands.append(
                CancelNode(current.node, current.iteration, current.attempt, reason)
            )
        if current.status is NodeStatus.HELD:
            self.commands.append(
                SettleExecution(
                    current.node, current.iteration, Phase.RUN, NodeStatus.CANCELLED, error=reason
                )
            )
        if not current.status.terminal:
            self.set_node(current, NodeStatus.CANCELLED)
        self.disarm_node_timers(current.node)

    def stop_all(self, reason: str) -> None:
        for current in list(self.state.nodes.values()):
            self.stop_execution(current, reason)
        for node_id, join in list(self.state.joins.items()):
            if not join.done:
                self.state.joins[node_id] = replace(join, done=True)
        self.disarm_all()

    def arm(self, timer: TimerState) -> None:
        self.state.timers[timer.timer_id] = timer
        self.commands.append(ArmTimer(timer.timer_id, timer.due_at))

    def disarm(self, timer: str) -> None:
        if self.state.timers.pop(timer, None) is not None:
            self.commands.append(DisarmTimer(timer))

    def disarm_all(self) -> None:
        for timer in list(self.state.timers):
            self.disarm(timer)

    def disarm_node_timers(self, node_id: str) -> None:
        for timer in list(self.state.timers.values()):
            if timer.node == node_id and timer.kind in (TimerKind.RETRY, TimerKind.NODE_TIMEOUT):
                self.disarm(timer.timer_id)

    # -- moves the other parts of the decider make, declared for one another -------------
    # (for the type checker only: the composed decision, moves.Moves, defines each)

    if TYPE_CHECKING:

        def enter(self, node_id: str, source: str, label: str) -> None: ...

        def schedule(
            self,
            node: AnyNode,
            iteration: int,
            attempt: int,
            current: NodeState | None,
            *,
            resumed: bool = False,
        ) -> None: ...

        def after_failure(
            self, node: AnyNode, current: NodeState, error_class: ErrorClass, message: str
        ) -> None: ...

        def node_succeeded(self, event: NodeSucceeded) -> str | None: ...

        def node_failed(self, event: NodeFailed) -> str | None: ...

        def settle_cancel(self) -> None: ...

        def fail_run(self, reason: str) -> None: ...

        def compensation_in_flight(
            self, node: str, iteration: int, attempt: int
        ) -> tuple[Compensation, NodeState] | str: ...

        def compensation_failed(
            self, event: NodeFailed, *, settled: bool = False
        ) -> str | None: ...
