"""The decider: ``decide(definition, state, event) -> Decision``. Pure.

No I/O, no clock, no randomness: the time comes in on the event, jitter is derived from
the execution key, and the only code it calls besides its own is a branch's guard, which
the definition contract requires to be a pure function of the state. Every rule about how
a run moves lives here; the store, the workers and the scheduler carry out its commands
and feed it events, and none of them re-implements a rule.

An event the run must refuse (a signal nobody waits for, a cancel of a finished run)
raises a :class:`~cairn.errors.CairnError` before anything is decided. An event that is
harmless but out of date (a duplicate delivery, a result from an attempt that was
already given up on, a timer that was disarmed) is *ignored*: the decision carries the
unchanged state and says why.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cairn.durations import format_duration
from cairn.errors import EventRejected, IllegalTransition, NotWaiting, UnknownNode, UnknownSignal
from cairn.orchestrator.commands import (
    ArmTimer,
    CancelNode,
    Command,
    DetachNode,
    DisarmTimer,
    Dispatch,
    FinishRun,
    HoldExecution,
    SettleExecution,
)
from cairn.orchestrator.definition import (
    AnyNode,
    EndNode,
    ErrorClass,
    Jitter,
    JoinPolicyKind,
    JoinRest,
    ParallelNode,
    RetryPolicy,
    TaskNode,
    WaitNode,
    WorkflowDefinition,
)
from cairn.orchestrator.events import (
    CancelRequested,
    Event,
    NodeCancelled,
    NodeFailed,
    NodeHeld,
    NodeSucceeded,
    Phase,
    PlanInvalidated,
    RollbackRequested,
    RunStarted,
    SignalReceived,
    TimerFired,
)
from cairn.orchestrator.state import (
    BranchOutcome,
    Compensation,
    CompletedStep,
    JoinState,
    NodeState,
    RunState,
    TimerKind,
    TimerState,
)
from cairn.orchestrator.statuses import NodeStatus, RunStatus, advance_node, advance_run

START = "(start)"
OPERATOR = "(operator)"  # who decides about a held node
REWIND = "(rewind)"  # where a rollback to a checkpoint resumes the run from
DECISIONS_KEY = "decisions"  # state field where wait decisions (signal, payload, actor) land
# An operator's decision about a held node (see NodeHeld). The prefix is reserved: no
# wait node may declare a signal of that name.
RECOVERY_PREFIX = "recovery."
RECOVERY_SIGNALS = ("recovery.retry", "recovery.complete", "recovery.fail")


def outcome_node(status: RunStatus) -> str:
    """The pseudo-node a transition leads to when it ends the run: ``"(failed)"``."""
    return f"({status.value})"


@dataclass(frozen=True)
class Transition:
    """One move along the workflow graph, as listed by ``cairn describe``."""

    source: str
    label: str
    target: str


@dataclass(frozen=True)
class Decision:
    state: RunState
    commands: tuple[Command, ...] = ()
    transitions: tuple[Transition, ...] = ()
    ignored: str | None = None  # why the event changed nothing, if it did not


def decide(definition: WorkflowDefinition, state: RunState, event: Event) -> Decision:
    """Apply one event to a run; return the new state and what to do about it.

    ``state`` is not modified. Raises :class:`~cairn.errors.IllegalTransition` or an
    :class:`~cairn.errors.EventRejected` subclass when the event is not acceptable.
    """
    step = _Step(definition, state.copy(), event.at)
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise EventRejected(f"the decider does not know event type {type(event).__name__}")
    ignored = handler(step, event)
    if ignored is not None:
        return Decision(state=state, ignored=ignored)
    step.state.steps += 1
    step.state.updated_at = event.at
    return Decision(step.state, tuple(step.commands), tuple(step.transitions))


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


class _Step:
    """The working copy of one decision: the state being changed and what was decided."""

    def __init__(self, definition: WorkflowDefinition, state: RunState, at: float) -> None:
        self.definition = definition
        self.state = state
        self.at = at
        self.commands: list[Command] = []
        self.transitions: list[Transition] = []

    # -- events -------------------------------------------------------------------------

    def started(self, event: RunStarted) -> str | None:
        if self.state.status is not RunStatus.PENDING:
            raise IllegalTransition(
                "run",
                self.state.run_id,
                self.state.status.value,
                RunStatus.RUNNING.value,
                "the run has already started",
            )
        self.state.vars = dict(event.input)
        self.state.started_at = event.at
        self.enter(self.definition.start, START, "started")
        return None

    def node_succeeded(self, event: NodeSucceeded) -> str | None:
        node = self.known_node(event.node)
        if event.phase is Phase.COMPENSATE:
            return self.compensation_succeeded(event)
        current, stale = self.current_execution(event.node, event.iteration, event.attempt)
        if stale:
            return stale
        self.disarm_node_timers(event.node)
        self.absorb_context(event)
        output = dict(event.output or {})
        if (
            self.state.status is RunStatus.CANCELLING
            or event.node in self.definition.branch_parents
        ):
            # Cancelling: keep the result readable (and compensable) but go nowhere.
            self.set_node(current, NodeStatus.SUCCEEDED)
            self.record_compensable(node, current)
            parent = self.definition.branch_parents.get(event.node)
            if parent is not None:
                self.transitions.append(Transition(event.node, "branch_succeeded", parent))
                self.branch_finished(parent, event.node, BranchOutcome.SUCCEEDED, output)
            else:
                self.state.vars.update(output)
            self.settle_cancel()
            return None
        assert isinstance(node, TaskNode)
        self.follow(node, current, output)
        return None

    def node_failed(self, event: NodeFailed) -> str | None:
        node = self.known_node(event.node)
        if event.phase is Phase.COMPENSATE:
            return self.compensation_failed(event)
        current, stale = self.current_execution(event.node, event.iteration, event.attempt)
        if stale:
            return stale
        self.disarm_node_timers(event.node)
        if self.state.status is RunStatus.CANCELLING:
            self.set_node(
                current, NodeStatus.FAILED, error_class=event.error_class.value, error=event.message
            )
            self.settle_cancel()
            return None
        self.node_failure(node, current, event.error_class, event.message)
        return None

    def node_cancelled(self, event: NodeCancelled) -> str | None:
        self.known_node(event.node)
        if event.phase is Phase.COMPENSATE:
            return "compensations are not cancelled; the acknowledgement changes nothing"
        current, stale = self.current_execution(event.node, event.iteration, event.attempt)
        if stale:
            return stale
        self.disarm_node_timers(event.node)
        self.set_node(current, NodeStatus.CANCELLED)
        parent = self.definition.branch_parents.get(event.node)
        if parent is not None and self.state.status is not RunStatus.CANCELLING:
            self.transitions.append(Transition(event.node, "branch_failed", parent))
            self.branch_finished(parent, event.node, BranchOutcome.CANCELLED, None)
        elif self.state.status is not RunStatus.CANCELLING:
            # Stopped without the run asking (an operator, a worker shutting down for good):
            # the run cannot go on without this node's result.
            self.after_failure(
                self.definition.nodes[event.node],
                current,
                ErrorClass.PERMANENT,
                "the node was cancelled",
            )
        self.settle_cancel()
        return None

    def signal(self, event: SignalReceived) -> str | None:
        state = self.state
        if event.signal_id and event.signal_id in state.signals_seen:
            return f"signal {event.signal_id!r} was already applied"
        if event.name.startswith(RECOVERY_PREFIX):
            return self.resolve_hold(event)
        waiting = state.waiting_on
        if state.status is not RunStatus.WAITING or waiting is None:
            raise NotWaiting(
                f"run {state.run_id} is {state.status.value}, not waiting; "
                f"signal {event.name!r} refused"
            )
        if event.wait is not None and (
            event.wait != waiting.node
            or (event.iteration is not None and event.iteration != waiting.iteration)
        ):
            raise EventRejected(
                f"signal {event.name!r} answers wait {event.wait!r}"
                f"{'' if event.iteration is None else f' (visit {event.iteration})'}, which is "
                f"already decided; the run now waits at {waiting.node!r} "
                f"(visit {waiting.iteration})"
            )
        node = self.definition.nodes[waiting.node]
        assert isinstance(node, WaitNode)
        target = node.signals.get(event.name)
        if target is None:
            raise UnknownSignal(
                f"wait {node.id!r} accepts {sorted(node.signals)}, not {event.name!r}"
            )
        if event.signal_id:
            state.signals_seen.append(event.signal_id)
        self.disarm(timer_id(TimerKind.WAIT, node.id, waiting.iteration))
        self.set_node(waiting, NodeStatus.SUCCEEDED)
        decisions = dict(state.vars.get(DECISIONS_KEY) or {})
        decisions[node.id] = {
            "signal": event.name,
            "payload": dict(event.payload or {}),
            "actor": event.actor,
            "at": event.at,
        }
        state.vars[DECISIONS_KEY] = decisions
        self.enter(target, node.id, f"signal:{event.name}")
        return None

    def timer_fired(self, event: TimerFired) -> str | None:
        timer = self.state.timers.pop(event.timer_id, None)
        if timer is None:
            return f"timer {event.timer_id!r} is not armed (fired already, or disarmed)"
        if timer.kind is TimerKind.CANCEL:
            self.detach_active()
            return None
        if timer.kind is TimerKind.JOIN_TIMEOUT:
            assert timer.node is not None
            self.join_timed_out(timer.node)
            return None
        if timer.kind is TimerKind.COMPENSATION_RETRY:
            self.compensation_retry_due()
            return None
        assert timer.node is not None
        current = self.state.nodes[timer.node]
        if current.iteration != timer.iteration:  # defensive: timers die with their execution
            return f"timer {timer.timer_id!r} belongs to an earlier visit of {timer.node!r}"
        node = self.definition.nodes[timer.node]
        if timer.kind is TimerKind.RETRY:
            self.schedule(node, current.iteration, current.attempt + 1, current)
        elif timer.kind is TimerKind.WAIT:
            assert isinstance(node, WaitNode)
            self.set_node(current, NodeStatus.TIMED_OUT)
            self.enter(node.on_timeout, node.id, "timeout")
        elif timer.kind is TimerKind.NODE_TIMEOUT:
            assert node.timeout is not None
            self.commands.append(
                CancelNode(node.id, current.iteration, current.attempt, "timed out")
            )
            self.node_failure(
                node,
                current,
                ErrorClass.TRANSIENT,
                f"timed out after {format_duration(node.timeout)}",
                timed_out=True,
            )
        return None

    def cancel_requested(self, event: CancelRequested) -> str | None:
        state = self.state
        if state.status.terminal:
            raise IllegalTransition(
                "run",
                state.run_id,
                state.status.value,
                RunStatus.CANCELLING.value,
                "the run is finished",
            )
        if state.status in (RunStatus.CANCELLING, RunStatus.COMPENSATING):
            return f"the run is already {state.status.value}"
        state.cancel = {"reason": event.reason, "actor": event.actor, "at": event.at}
        if state.status is RunStatus.PENDING:
            self.finish(RunStatus.CANCELLED, event.reason)
            return None
        self.stop_for_cancel(event.reason)
        return None

    def rollback_requested(self, event: RollbackRequested) -> str | None:
        """Undo the whole run: stop it as a cancel does, then compensate every step that
        took effect (last first); it ends ``rolled_back``. Or undo less and resume: back
        to a checkpoint (``to_seq``: the steps after it), or one step (``step``: its
        compensation only, then the run goes on from where it is)."""
        state = self.state
        if state.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            why = (
                "the run is finished"
                if state.status.terminal
                else f"the run is {state.status.value}: nothing to roll back now"
            )
            raise IllegalTransition(
                "run", state.run_id, state.status.value, RunStatus.ROLLED_BACK.value, why
            )
        state.cancel = {
            "reason": event.reason,
            "actor": event.actor,
            "at": event.at,
            "rollback": True,
        }
        if event.step is not None:
            undone = self.compensable_step(event.step, event.step_iteration)
            here = copy.deepcopy(state.to_dict())  # the checkpoint is now, less that step
            here["compensable"] = [s for s in here["compensable"] if s != undone]
            here["cancel"] = None
            state.cancel.update(step=undone, rewind=here)
            target = REWIND
        elif event.to_seq is not None:
            if event.rewind is None:
                raise EventRejected("a rollback to a checkpoint carries the state to rewind to")
            state.cancel.update(to_seq=event.to_seq, rewind=dict(event.rewind))
            target = REWIND
        else:
            target = outcome_node(RunStatus.ROLLED_BACK)
        self.transitions.append(Transition("*", "rollback", target))
        self.stop_for_cancel(event.reason)
        return None

    def compensable_step(self, node: str, iteration: int | None) -> dict[str, Any]:
        """The step a single-step rollback undoes (its latest visit unless named)."""
        steps = [
            step
            for step in self.state.compensable
            if step.node == node and (iteration is None or step.iteration == iteration)
        ]
        if not steps:
            raise EventRejected(
                f"{node}{'' if iteration is None else f'#{iteration}'} has no change to undo: "
                "it is not a succeeded step with a compensation, or it was undone already"
            )
        return {"node": steps[-1].node, "iteration": steps[-1].iteration}

    def stop_for_cancel(self, reason: str) -> None:
        """Nothing new starts; running executions are asked to stop; the run ends once
        they have (or the cancel timeout detaches them)."""
        state = self.state
        self.disarm_all()
        for current in list(state.nodes.values()):
            if current.status in (NodeStatus.WAITING, NodeStatus.RETRYING, NodeStatus.HELD):
                self.stop_execution(current, reason)
            elif current.active:
                self.commands.append(
                    CancelNode(current.node, current.iteration, current.attempt, reason)
                )
        self.set_run(RunStatus.CANCELLING)
        if state.active_nodes:
            self.arm(
                TimerState(
                    timer_id(TimerKind.CANCEL),
                    TimerKind.CANCEL,
                    self.at + self.definition.cancel_timeout.total_seconds(),
                )
            )
        self.settle_cancel()

    # -- recovery that needs a person, and re-planning after a resume -------------------

    def node_held(self, event: NodeHeld) -> str | None:
        self.known_node(event.node)
        if self.state.status is RunStatus.CANCELLING:
            return "the run is cancelling: dispatched again, the node stops before it runs"
        if event.phase is Phase.COMPENSATE:
            found = self.compensation_in_flight(event.node, event.iteration, event.attempt)
            if isinstance(found, str):
                return found
            compensation, current = found
            self.state.compensation = replace(
                compensation, current=self.moved(current, NodeStatus.HELD, error=event.reason)
            )
        else:
            current, stale = self.current_execution(event.node, event.iteration, event.attempt)
            if stale:
                return stale
            self.disarm_node_timers(event.node)
            self.set_node(current, NodeStatus.HELD, error=event.reason)
            if self.state.status is RunStatus.RUNNING:
                self.set_run(RunStatus.WAITING)
        self.commands.append(HoldExecution(event.node, event.iteration, event.attempt, event.phase))
        self.transitions.append(Transition(event.node, "held", OPERATOR))
        return None

    def resolve_hold(self, event: SignalReceived) -> str | None:
        """An operator's decision about a held execution: run it again (a new attempt),
        or settle it as having succeeded (with the output they vouch for) or failed."""
        state = self.state
        if event.name not in RECOVERY_SIGNALS:
            raise UnknownSignal(
                f"{event.name!r} is not a recovery decision; one of {list(RECOVERY_SIGNALS)}"
            )
        held = [
            (current, phase)
            for current, phase in state.held
            if (event.wait is None or current.node == event.wait)
            and (event.iteration is None or current.iteration == event.iteration)
        ]
        if not held:
            where = "" if event.wait is None else f" at {event.wait!r}"
            raise NotWaiting(
                f"run {state.run_id} has no node held for an operator{where}; "
                f"signal {event.name!r} refused"
            )
        if len(held) > 1:
            names = sorted(f"{current.node}#{current.iteration}" for current, _ in held)
            raise EventRejected(f"several nodes are held ({names}): name the one to decide on")
        current, phase = held[0]
        payload = dict(event.payload or {})
        output = payload.get("output", {})
        if not isinstance(output, Mapping):
            raise EventRejected("recovery.complete takes the node's output as a JSON object")
        if event.signal_id:
            state.signals_seen.append(event.signal_id)
        node = self.definition.nodes[current.node]
        self.transitions.append(Transition(OPERATOR, event.name, node.id))
        if event.name == "recovery.retry":
            attempt = current.attempt + 1
            if phase is Phase.COMPENSATE:
                self.set_compensation(
                    self.moved(current, NodeStatus.SCHEDULED, attempt=attempt, error=None)
                )
                self.commands.append(
                    Dispatch(node.id, current.iteration, attempt, phase, resumed=True)
                )
            else:
                self.schedule(node, current.iteration, attempt, current, resumed=True)
            self.resume_run()
            return None
        # Settled by the operator: the execution ends as if its worker had reported it.
        running = self.moved(current, NodeStatus.RUNNING, error=None)
        if phase is Phase.COMPENSATE:
            self.set_compensation(running)
        else:
            state.nodes[current.node] = running
        self.resume_run()
        iteration, attempt = current.iteration, current.attempt
        if event.name == "recovery.complete":
            self.commands.append(
                SettleExecution(node.id, iteration, phase, NodeStatus.SUCCEEDED, result=output)
            )
            return self.node_succeeded(
                NodeSucceeded(event.at, node.id, iteration, attempt, output, phase)
            )
        reason = str(payload.get("reason") or "failed by an operator after its worker was lost")
        self.commands.append(
            SettleExecution(node.id, iteration, phase, NodeStatus.FAILED, error=reason)
        )
        failed = NodeFailed(
            event.at, node.id, iteration, attempt, ErrorClass.PERMANENT, reason, phase
        )
        if phase is Phase.COMPENSATE:
            return self.compensation_failed(failed, settled=True)
        return self.node_failed(failed)

    def plan_invalidated(self, event: PlanInvalidated) -> str | None:
        on_resume = self.definition.on_resume
        if on_resume is None:
            raise EventRejected(f"workflow {self.definition.key} declares no on_resume")
        current, stale = self.current_execution(event.node, event.iteration, event.attempt)
        if stale:
            return stale
        self.set_node(current, NodeStatus.CANCELLED, error=f"re-planning: {event.reason}")
        if self.state.status is RunStatus.CANCELLING:
            self.settle_cancel()
            return None
        self.stop_all(f"re-planning: {event.reason}")
        self.enter(on_resume.replan, event.node, "replan")
        return None

    def resume_run(self) -> None:
        """A hold was decided: the run is running again unless something else still
        waits for a person."""
        if self.state.status is RunStatus.WAITING and not (
            self.state.waiting_on or self.state.held
        ):
            self.set_run(RunStatus.RUNNING)

    # -- moving along the graph ---------------------------------------------------------

    def enter(self, node_id: str, source: str, label: str) -> None:
        definition, state = self.definition, self.state
        node = definition.nodes[node_id]
        self.transitions.append(Transition(source, label, node_id))
        visits = state.visits.get(node_id, 0) + 1
        state.visits[node_id] = visits
        limit = definition.visit_limit(node_id)
        if limit is not None and visits > limit:
            self.transitions.append(
                Transition(node_id, "visits_exceeded", outcome_node(RunStatus.FAILED))
            )
            self.fail_run(f"max_visits: {node_id!r} was entered more than {limit} times")
            return
        if isinstance(node, EndNode):
            self.transitions.append(Transition(node_id, "end", outcome_node(node.status)))
            if node.status is RunStatus.FAILED:
                self.fail_run(f"reached end node {node_id!r}")
            else:
                self.finish(
                    node.status,
                    None if node.status is RunStatus.SUCCEEDED else f"reached end node {node_id!r}",
                )
        elif isinstance(node, WaitNode):
            assert node.timeout is not None
            state.nodes[node_id] = NodeState(node_id, visits, NodeStatus.WAITING, first_at=self.at)
            self.arm(
                TimerState(
                    timer_id(TimerKind.WAIT, node_id, visits),
                    TimerKind.WAIT,
                    self.at + node.timeout.total_seconds(),
                    node_id,
                    visits,
                )
            )
            self.set_run(RunStatus.WAITING)
        elif isinstance(node, ParallelNode):
            self.set_run(RunStatus.RUNNING)
            state.nodes[node_id] = NodeState(
                node_id, visits, NodeStatus.RUNNING, first_at=self.at, dispatched=False
            )
            state.joins[node_id] = JoinState(
                node_id, visits, dict.fromkeys(node.branches, BranchOutcome.PENDING)
            )
            if node.join.timeout is not None:
                self.arm(
                    TimerState(
                        timer_id(TimerKind.JOIN_TIMEOUT, node_id, visits),
                        TimerKind.JOIN_TIMEOUT,
                        self.at + node.join.timeout.total_seconds(),
                        node_id,
                        visits,
                    )
                )
            for branch in node.branches:
                if not self.moving:
                    break
                self.enter(branch, node_id, "fan_out")
        else:
            self.set_run(RunStatus.RUNNING)
            if node.handler is not None:
                self.schedule(node, visits, 1, None)
            else:  # a pure decision node: no work to dispatch, follow the edge now
                current = NodeState(node_id, visits, NodeStatus.SCHEDULED, first_at=self.at)
                state.nodes[node_id] = current
                self.follow(node, current, {})

    def follow(self, node: TaskNode, current: NodeState, output: Mapping[str, Any]) -> None:
        """A task succeeded: merge its output and take the edge its definition picks."""
        merged = {**self.state.vars, **output}
        if node.next is not None:
            label, target = "succeeded", node.next
        elif node.branch is not None:
            try:
                raw = node.branch.guard.resolve()(dict(merged))
            except Exception as exc:  # the guard is user code; its failure fails the node
                self.node_failure(
                    node,
                    current,
                    ErrorClass.PERMANENT,
                    f"guard {node.branch.guard.path} raised {type(exc).__name__}: {exc}",
                )
                return
            case = label_of(raw)
            if case is None or case not in node.branch.cases:
                self.node_failure(
                    node,
                    current,
                    ErrorClass.PERMANENT,
                    f"guard {node.branch.guard.path} returned {raw!r}, not one of "
                    f"{sorted(node.branch.cases)}",
                )
                return
            label, target = f"case:{case}", node.branch.cases[case]
        else:
            assert node.route is not None
            value = label_of(merged.get(node.route.key))
            if value is not None and value in node.route.table:
                label, target = f"route:{value}", node.route.table[value]
            else:
                label, target = "route:default", node.route.default
        self.set_node(current, NodeStatus.SUCCEEDED)
        self.state.vars = merged
        self.record_compensable(node, current)
        self.enter(target, node.id, label)

    def schedule(
        self,
        node: AnyNode,
        iteration: int,
        attempt: int,
        current: NodeState | None,
        *,
        resumed: bool = False,
    ) -> None:
        if current is None:
            self.state.nodes[node.id] = NodeState(
                node.id, iteration, NodeStatus.SCHEDULED, attempt, first_at=self.at
            )
        else:
            cleared = {"error": None} if resumed else {}  # the hold's reason is history now
            self.set_node(current, NodeStatus.SCHEDULED, attempt=attempt, **cleared)
        self.commands.append(Dispatch(node.id, iteration, attempt, resumed=resumed))
        if node.timeout is not None:
            self.arm(
                TimerState(
                    timer_id(TimerKind.NODE_TIMEOUT, node.id, iteration, attempt),
                    TimerKind.NODE_TIMEOUT,
                    self.at + node.timeout.total_seconds(),
                    node.id,
                    iteration,
                    attempt,
                )
            )

    def node_failure(
        self,
        node: AnyNode,
        current: NodeState,
        error_class: ErrorClass,
        message: str,
        *,
        timed_out: bool = False,
    ) -> None:
        policy = node.retry
        if error_class is ErrorClass.TRANSIENT and current.attempt < policy.attempts:
            delay = retry_delay_s(
                policy, self.state.run_id, node.id, current.iteration, current.attempt
            )
            within_deadline = (
                policy.deadline is None
                or self.at + delay - current.first_at <= policy.deadline.total_seconds()
            )
            if within_deadline:
                self.set_node(
                    current, NodeStatus.RETRYING, error_class=error_class.value, error=message
                )
                self.arm(
                    TimerState(
                        timer_id(TimerKind.RETRY, node.id, current.iteration, current.attempt),
                        TimerKind.RETRY,
                        self.at + delay,
                        node.id,
                        current.iteration,
                        current.attempt,
                    )
                )
                self.transitions.append(Transition(node.id, "retry", node.id))
                return
        status = NodeStatus.TIMED_OUT if timed_out else NodeStatus.FAILED
        current = self.set_node(current, status, error_class=error_class.value, error=message)
        self.after_failure(node, current, error_class, message)

    def after_failure(
        self, node: AnyNode, current: NodeState, error_class: ErrorClass, message: str
    ) -> None:
        parent = self.definition.branch_parents.get(node.id)
        if parent is not None:
            self.transitions.append(Transition(node.id, "branch_failed", parent))
            self.branch_finished(parent, node.id, BranchOutcome.FAILED, None)
            return
        label = f"failed:{error_class.value}"
        target = node.on_error.get(error_class)
        if target is not None:
            self.enter(target, node.id, label)
            return
        self.transitions.append(Transition(node.id, label, outcome_node(RunStatus.FAILED)))
        self.fail_run(f"{node.id}: {error_class.value} error: {message}")

    # -- joins --------------------------------------------------------------------------

    def branch_finished(
        self, parent_id: str, branch: str, outcome: BranchOutcome, output: Mapping[str, Any] | None
    ) -> None:
        parent = self.definition.nodes[parent_id]
        assert isinstance(parent, ParallelNode)
        join = self.state.joins[parent_id]
        default = self.definition.nodes[branch].default
        if (
            outcome is BranchOutcome.FAILED
            and parent.join.policy is JoinPolicyKind.CRITICAL
            and branch not in parent.join.critical
            and default is not None
        ):
            outcome, output = BranchOutcome.DEFAULTED, default
        join = join.with_outcome(branch, outcome, output)
        self.state.joins[parent_id] = join
        if not join.done and self.moving:
            self.evaluate_join(parent, join)

    def evaluate_join(self, parent: ParallelNode, join: JoinState) -> None:
        outcomes = join.outcomes
        ok = sum(o in (BranchOutcome.SUCCEEDED, BranchOutcome.DEFAULTED) for o in outcomes.values())
        bad = sum(o in (BranchOutcome.FAILED, BranchOutcome.CANCELLED) for o in outcomes.values())
        pending = sum(o is BranchOutcome.PENDING for o in outcomes.values())
        policy = parent.join
        failure: str | None = None
        complete = False
        if policy.policy is JoinPolicyKind.ALL:
            if bad:
                failure = f"{bad} of {len(outcomes)} branches failed (policy all)"
            complete = pending == 0
        elif policy.policy is JoinPolicyKind.QUORUM:
            assert policy.k is not None
            complete = ok >= policy.k
            if not complete and ok + pending < policy.k:
                failure = f"only {ok} of {len(outcomes)} branches can succeed, quorum is {policy.k}"
        else:
            lost = [
                b
                for b in policy.critical
                if outcomes[b] in (BranchOutcome.FAILED, BranchOutcome.CANCELLED)
            ]
            if lost:
                failure = f"critical branch(es) {lost} failed"
            complete = pending == 0
        if failure is not None:
            self.join_failed(parent, join, failure)
        elif complete:
            self.join_complete(parent, join)

    def join_timed_out(self, parent_id: str) -> None:
        parent = self.definition.nodes[parent_id]
        assert isinstance(parent, ParallelNode)
        join = self.state.joins[parent_id]
        for branch, outcome in join.outcomes.items():
            if outcome is not BranchOutcome.PENDING:
                continue
            self.stop_execution(self.state.nodes[branch], "the join timed out")
            default = self.definition.nodes[branch].default
            join = (
                join.with_outcome(branch, BranchOutcome.DEFAULTED, default)
                if default is not None
                else join.with_outcome(branch, BranchOutcome.FAILED)
            )
        self.state.joins[parent_id] = join
        self.evaluate_join(parent, join)

    def join_complete(self, parent: ParallelNode, join: JoinState) -> None:
        self.disarm(timer_id(TimerKind.JOIN_TIMEOUT, parent.id, join.iteration))
        merged: dict[str, Any] = {}
        for branch in parent.branches:  # declared order, so the merge is deterministic
            if join.outcomes[branch] in (BranchOutcome.SUCCEEDED, BranchOutcome.DEFAULTED):
                merged.update(join.outputs.get(branch, {}))
        if parent.join.rest is JoinRest.CANCEL:
            for branch, outcome in join.outcomes.items():
                if outcome is BranchOutcome.PENDING:
                    self.stop_execution(self.state.nodes[branch], "the join is complete")
                    join = join.with_outcome(branch, BranchOutcome.CANCELLED)
        self.state.joins[parent.id] = replace(join, done=True)
        self.state.vars.update(merged)
        self.set_node(self.state.nodes[parent.id], NodeStatus.SUCCEEDED)
        self.enter(parent.next, parent.id, "joined")

    def join_failed(self, parent: ParallelNode, join: JoinState, reason: str) -> None:
        self.disarm(timer_id(TimerKind.JOIN_TIMEOUT, parent.id, join.iteration))
        for branch, outcome in join.outcomes.items():
            if outcome is BranchOutcome.PENDING:
                self.stop_execution(self.state.nodes[branch], "the join failed")
                join = join.with_outcome(branch, BranchOutcome.CANCELLED)
        self.state.joins[parent.id] = replace(join, done=True)
        current = self.set_node(
            self.state.nodes[parent.id],
            NodeStatus.FAILED,
            error_class=ErrorClass.PERMANENT.value,
            error=reason,
        )
        self.after_failure(parent, current, ErrorClass.PERMANENT, f"join failed: {reason}")

    # -- ending: success, failure, cancellation, compensation ---------------------------

    def fail_run(self, reason: str) -> None:
        if self.state.compensable:
            self.start_compensation(RunStatus.COMPENSATED, reason)
        else:
            self.finish(RunStatus.FAILED, reason)

    def finish(self, status: RunStatus, reason: str | None) -> None:
        self.stop_all(reason or f"the run {status.value}")
        self.set_run(status)
        self.state.reason = reason
        self.commands.append(FinishRun(status, reason))

    def settle_cancel(self) -> None:
        """Once a cancelling run has nothing running, it compensates (if asked) and ends."""
        state = self.state
        if state.status is not RunStatus.CANCELLING or state.active_nodes:
            return
        self.disarm(timer_id(TimerKind.CANCEL))
        reason = (state.cancel or {}).get("reason") or "cancelled"
        if (state.cancel or {}).get("rewind") is not None:
            self.undo_after_checkpoint(reason)
            return
        rollback = bool((state.cancel or {}).get("rollback"))
        final = RunStatus.ROLLED_BACK if rollback else RunStatus.CANCELLED
        if (rollback or self.definition.compensate_on_cancel) and state.compensable:
            self.start_compensation(final, reason)
        else:
            self.finish(final, reason)

    def detach_active(self) -> None:
        """The cancel timeout passed: stop waiting for nodes that did not stop."""
        for current in self.state.active_nodes:
            self.commands.append(DetachNode(current.node, current.iteration, current.attempt))
            self.set_node(current, NodeStatus.CANCELLED, error="detached after cancel timeout")
        self.settle_cancel()

    def start_compensation(self, final_status: RunStatus, reason: str) -> None:
        self.stop_all(reason)
        pending = tuple(reversed(self.state.compensable))
        self.state.compensable = []
        self.set_run(RunStatus.COMPENSATING)
        self.state.reason = reason
        self.state.compensation = Compensation(pending, final_status, reason)
        self.dispatch_compensation()

    def undo_after_checkpoint(self, reason: str) -> None:
        """Rolling back to a checkpoint, once nothing runs: compensate the steps that took
        effect after it (last first), then rewind."""
        state = self.state
        assert state.cancel is not None
        kept = {
            (s.node, s.iteration) for s in RunState.from_dict(state.cancel["rewind"]).compensable
        }
        undo = [s for s in state.compensable if (s.node, s.iteration) not in kept]
        self.stop_all(reason)
        state.compensable = [s for s in state.compensable if (s.node, s.iteration) in kept]
        self.set_run(RunStatus.COMPENSATING)  # even with nothing to undo: never un-cancel
        state.compensation = Compensation(
            tuple(reversed(undo)), RunStatus.RUNNING, reason, rewind=True
        )
        self.dispatch_compensation()

    def rewind(self) -> None:
        """The state as it was at the checkpoint; what was in progress then starts again,
        each as a new visit (an execution key is never reused)."""
        state = self.state
        assert state.cancel is not None
        target = RunState.from_dict(state.cancel["rewind"])
        in_progress = [
            node for node in target.nodes.values() if node.dispatched and not node.status.terminal
        ]
        state.vars, state.messages = target.vars, target.messages
        state.sessions, state.artifacts = target.sessions, target.artifacts
        state.compensable, state.joins = target.compensable, target.joins
        state.nodes = {k: n for k, n in target.nodes.items() if n.status.terminal}
        state.signals_seen = list(dict.fromkeys([*target.signals_seen, *state.signals_seen]))
        state.cancel, state.reason, state.compensation = None, None, None
        self.set_run(RunStatus.RUNNING)
        for node in in_progress:
            if self.moving:
                self.enter(node.node, REWIND, "rewind")

    def dispatch_compensation(self) -> None:
        compensation = self.state.compensation
        assert compensation is not None
        if not compensation.pending:
            self.state.compensation = None
            if compensation.rewind:
                self.rewind()
            else:
                self.finish(compensation.final_status, compensation.reason)
            return
        step = compensation.pending[0]
        current = NodeState(step.node, step.iteration, NodeStatus.SCHEDULED, 1, first_at=self.at)
        self.state.compensation = replace(compensation, current=current)
        self.commands.append(Dispatch(step.node, step.iteration, 1, Phase.COMPENSATE))

    def compensation_in_flight(
        self, node: str, iteration: int, attempt: int
    ) -> tuple[Compensation, NodeState] | str:
        """The compensation this result belongs to, or why the result is stale."""
        compensation = self.state.compensation
        current = compensation.current if compensation else None
        if (
            compensation is None
            or current is None
            or (current.node, current.iteration, current.attempt) != (node, iteration, attempt)
            or not current.active
        ):
            return f"no compensation of {node}#{iteration} attempt {attempt} is in flight"
        return compensation, current

    def compensation_succeeded(self, event: NodeSucceeded) -> str | None:
        found = self.compensation_in_flight(event.node, event.iteration, event.attempt)
        if isinstance(found, str):
            return found
        compensation, current = found
        advance_node(self.subject(current), current.status, NodeStatus.SUCCEEDED)
        self.state.vars.update(event.output or {})
        self.state.compensation = replace(
            compensation, pending=compensation.pending[1:], current=None
        )
        self.dispatch_compensation()
        return None

    def compensation_failed(self, event: NodeFailed, *, settled: bool = False) -> str | None:
        """A compensation failed: retried by its node's policy; then held for an operator
        (the run stays compensating: undoing half of a saga must not be guessed); an
        operator's ``recovery.fail`` (``settled``) ends the run failed with the scene."""
        found = self.compensation_in_flight(event.node, event.iteration, event.attempt)
        if isinstance(found, str):
            return found
        compensation, current = found
        policy = self.definition.nodes[event.node].retry
        if settled:
            pass
        elif event.error_class is ErrorClass.TRANSIENT and current.attempt < policy.attempts:
            retrying = replace(
                current,
                status=advance_node(self.subject(current), current.status, NodeStatus.RETRYING),
                error_class=event.error_class.value,
                error=event.message,
            )
            self.state.compensation = replace(compensation, current=retrying)
            delay = retry_delay_s(
                policy,
                self.state.run_id,
                f"{event.node}:compensate",
                current.iteration,
                current.attempt,
            )
            self.arm(
                TimerState(
                    timer_id(
                        TimerKind.COMPENSATION_RETRY,
                        event.node,
                        current.iteration,
                        current.attempt,
                    ),
                    TimerKind.COMPENSATION_RETRY,
                    self.at + delay,
                    event.node,
                    current.iteration,
                    current.attempt,
                )
            )
            return None
        else:
            reason = (
                f"compensation failed ({event.error_class.value}: {event.message}) and "
                "its retries are exhausted"
            )
            self.set_compensation(
                self.moved(
                    current, NodeStatus.HELD, error_class=event.error_class.value, error=reason
                )
            )
            self.commands.append(
                HoldExecution(event.node, event.iteration, event.attempt, Phase.COMPENSATE)
            )
            self.transitions.append(Transition(event.node, "held", OPERATOR))
            return None
        advance_node(self.subject(current), current.status, NodeStatus.FAILED)
        self.state.compensation = None
        self.finish(
            RunStatus.FAILED,
            f"compensation of {event.node} (visit {event.iteration}) failed "
            f"({event.error_class.value}: {event.message}); an operator failed it. "
            f"Original failure: {compensation.reason}",
        )
        return None

    def compensation_retry_due(self) -> None:
        compensation = self.state.compensation
        if compensation is None or compensation.current is None:
            return
        current = compensation.current
        attempt = current.attempt + 1
        status = advance_node(self.subject(current), current.status, NodeStatus.SCHEDULED)
        self.state.compensation = replace(
            compensation, current=replace(current, status=status, attempt=attempt)
        )
        self.commands.append(Dispatch(current.node, current.iteration, attempt, Phase.COMPENSATE))

    # -- helpers ------------------------------------------------------------------------

    def absorb_context(self, event: NodeSucceeded) -> None:
        """Keep what the handler added to the agent context: it is part of the checkpoint."""
        self.state.messages.extend(dict(message) for message in event.messages)
        for name, session in (event.sessions or {}).items():
            if session is None:
                self.state.sessions.pop(name, None)
            else:
                self.state.sessions[name] = session

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


_HANDLERS: dict[type[Event], Callable[[_Step, Any], str | None]] = {
    RunStarted: _Step.started,
    NodeSucceeded: _Step.node_succeeded,
    NodeFailed: _Step.node_failed,
    NodeCancelled: _Step.node_cancelled,
    NodeHeld: _Step.node_held,
    PlanInvalidated: _Step.plan_invalidated,
    SignalReceived: _Step.signal,
    TimerFired: _Step.timer_fired,
    CancelRequested: _Step.cancel_requested,
    RollbackRequested: _Step.rollback_requested,
}
