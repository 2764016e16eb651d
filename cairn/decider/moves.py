"""How a run moves along the graph, and what a node's reported result does.

:class:`Moves` is one decision with all its parts: entering a node (an end, a wait, a
fan-out, or a task to schedule), following a task's edge (``next``, a branch's guard, a
route), scheduling an execution or the child run that executes it, retrying or failing
a node, and the results a worker (or a child run) reports. The other parts of the same
decision come from :mod:`~cairn.decider.joins`, :mod:`~cairn.decider.stopping` (failure,
cancel, compensation, rollback), :mod:`~cairn.decider.holds` (operator decisions,
re-planning) and :mod:`~cairn.decider.watch` (the anomaly watch), on the shared
:class:`~cairn.decider.step.Step`; signals and fired timers are handled by
:mod:`~cairn.decider.signal_received` and :mod:`~cairn.decider.timer_fired`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from dataclasses import replace
from typing import Any

from cairn.decider.budget import added, allowance, branch_allowances
from cairn.decider.children import MAX_DEPTH, child_run_id, correlation_id, picked
from cairn.decider.holds import Holds
from cairn.decider.joins import Joins
from cairn.decider.step import (
    DECISIONS_KEY,
    START,
    Step,
    Transition,
    label_of,
    outcome_node,
    retry_delay_s,
    timer_id,
)
from cairn.decider.stopping import Stopping
from cairn.decider.watch import Watch
from cairn.errors import IllegalTransition
from cairn.model.commands import Dispatch, NotifyParent, StartChild
from cairn.model.definition import (
    AnyNode,
    EndNode,
    ErrorClass,
    ParallelNode,
    TaskNode,
    WaitNode,
)
from cairn.model.events import (
    ChildFinished,
    NodeCancelled,
    NodeFailed,
    NodeSucceeded,
    Phase,
    RunStarted,
    SignalReceived,
    event_to_dict,
)
from cairn.model.reducers import ReducerMismatch, reduced
from cairn.model.state import (
    BranchOutcome,
    JoinState,
    NodeState,
    TimerKind,
    TimerState,
)
from cairn.model.statuses import NodeStatus, RunStatus


class Moves(Watch, Holds, Stopping, Joins, Step):
    """One decision: how a run moves along the graph, and what a node's result does."""

    # -- the run starts, a node reports its result ---------------------------------------

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
        self.state.parent = dict(event.parent) if event.parent is not None else None
        self.state.budget = dict(event.budget) if event.budget is not None else None
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
        current = self.charge(current, event.charges)
        self.disarm_node_timers(event.node)
        self.absorb_context(event)
        self.note_tool_calls(event)
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
                with suppress(ReducerMismatch):  # going nowhere: a misfit is only not kept
                    self.state.vars = reduced(self.definition.reducers, self.state.vars, output)
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
        current = self.charge(current, event.charges)
        self.disarm_node_timers(event.node)
        if self.state.status is RunStatus.CANCELLING:
            self.set_node(
                current, NodeStatus.FAILED, error_class=event.error_class.value, error=event.message
            )
            self.settle_cancel()
            return None
        self.node_failure(
            node, current, event.error_class, event.message, retry_after_s=event.retry_after_s
        )
        return None

    def node_cancelled(self, event: NodeCancelled) -> str | None:
        self.known_node(event.node)
        if event.phase is Phase.COMPENSATE:
            return "compensations are not cancelled; the acknowledgement changes nothing"
        current, stale = self.current_execution(event.node, event.iteration, event.attempt)
        if stale:
            return stale
        current = self.charge(current, event.charges)
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

    def child_finished(self, event: ChildFinished) -> str | None:
        """The child run executing a node ended: the node ends as the child did."""
        current = self.state.nodes.get(event.node)
        if current is not None and current.child != event.child_run_id:
            return f"child run {event.child_run_id} no longer executes {event.node!r}"
        common: dict[str, Any] = {
            "at": event.at,
            "node": event.node,
            "iteration": event.iteration,
            "attempt": event.attempt,
            "charges": event.charges,
        }
        if event.status == RunStatus.SUCCEEDED.value:
            node = self.known_node(event.node)
            fields = node.child.output if isinstance(node, TaskNode) and node.child else None
            return self.node_succeeded(
                NodeSucceeded(**common, output=picked(fields, event.output or {}))
            )
        if event.status == RunStatus.CANCELLED.value:
            return self.node_cancelled(NodeCancelled(**common))
        message = f"child run {event.child_run_id} ended {event.status}: {event.reason or ''}"
        return self.node_failed(
            NodeFailed(**common, error_class=ErrorClass.PERMANENT, message=message.rstrip(": "))
        )

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
        if self.anomaly_diverted(node_id):
            return
        if isinstance(node, EndNode):
            self.enter_end(node)
        elif isinstance(node, WaitNode):
            self.enter_wait(node, visits)
        elif isinstance(node, ParallelNode):
            self.enter_parallel(node, visits)
        else:
            self.enter_task(node, visits)

    def enter_end(self, node: EndNode) -> None:
        """An end node: the run finishes with the status it names."""
        node_id = node.id
        self.transitions.append(Transition(node_id, "end", outcome_node(node.status)))
        if node.status is RunStatus.FAILED:
            self.fail_run(f"reached end node {node_id!r}")
        else:
            self.finish(
                node.status,
                None if node.status is RunStatus.SUCCEEDED else f"reached end node {node_id!r}",
            )

    def enter_wait(self, node: WaitNode, visits: int) -> None:
        """A wait node: the run waits for its signal, against the node's timeout."""
        node_id = node.id
        assert node.timeout is not None
        self.state.nodes[node_id] = NodeState(node_id, visits, NodeStatus.WAITING, first_at=self.at)
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
        self.open_wait(node, self.state.nodes[node_id])

    def enter_parallel(self, node: ParallelNode, visits: int) -> None:
        """A fan-out: its join is opened (with its timeout, if any), then each branch is
        entered while the run still moves."""
        definition, state = self.definition, self.state
        node_id = node.id
        self.set_run(RunStatus.RUNNING)
        state.nodes[node_id] = NodeState(
            node_id, visits, NodeStatus.RUNNING, first_at=self.at, dispatched=False
        )
        state.joins[node_id] = JoinState(
            node_id,
            visits,
            dict.fromkeys(node.branches, BranchOutcome.PENDING),
            allowances=branch_allowances(definition, state, node),
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
        if self.moving:
            self.settle_waiting()

    def enter_task(self, node: TaskNode, visits: int) -> None:
        """A task: its work (a handler or a child run) is scheduled, its first attempt."""
        self.set_run(RunStatus.RUNNING)
        if node.handler is not None or node.child is not None:
            self.schedule(node, visits, 1, None)
        else:  # a pure decision node: no work to dispatch, follow the edge now
            current = NodeState(node.id, visits, NodeStatus.SCHEDULED, first_at=self.at)
            self.state.nodes[node.id] = current
            self.follow(node, current, {})

    def open_wait(self, node: WaitNode, waiting: NodeState) -> None:
        """A wait just opened: the signal kept for it (``accept_early``), if any, decides
        it now."""
        kept = self.state.early.pop(node.id, None)
        if kept is not None:
            event = SignalReceived(**{**kept, "wait": node.id, "iteration": waiting.iteration})
            self.decide_wait(waiting, node, event, node.signals[event.name])

    def decide_wait(
        self, waiting: NodeState, node: WaitNode, event: SignalReceived, target: str
    ) -> None:
        """``event`` decides the wait: it goes on to ``target``, and the decision (signal,
        payload, actor, its voters under a quorum, the decider's comment) lands in the
        state's ``decisions``."""
        state = self.state
        self.disarm(timer_id(TimerKind.WAIT, node.id, waiting.iteration))
        self.set_node(waiting, NodeStatus.SUCCEEDED)
        decision: dict[str, Any] = {
            "signal": event.name,
            "payload": dict(event.payload or {}),
            "actor": event.actor,
            "at": event.at,
        }
        voters = (waiting.votes or {}).get(event.name)
        if node.quorum > 1 and voters:
            decision["votes"] = list(voters)
        if event.comment:
            decision["comment"] = event.comment
        state.vars[DECISIONS_KEY] = {**(state.vars.get(DECISIONS_KEY) or {}), node.id: decision}
        self.leave_wait(node, target, f"signal:{event.name}")

    def leave_wait(self, node: WaitNode, target: str, label: str) -> None:
        """A wait decided (or timed out) goes on to ``target`` — or, a parallel branch,
        ends its branch as ``target`` says (succeeded or failed), for its join."""
        parent = self.definition.branch_parents.get(node.id)
        if parent is None:
            self.enter(target, node.id, label)
        else:
            self.transitions.append(Transition(node.id, label, parent))
            ended = BranchOutcome.SUCCEEDED if target == "succeeded" else BranchOutcome.FAILED
            self.branch_finished(parent, node.id, ended, None)
        self.settle_waiting()

    def settle_waiting(self) -> None:
        """Running while a worker may run something; waiting while only people are
        awaited — with waits as parallel branches, a branch's end can leave either."""
        state = self.state
        if state.status is RunStatus.RUNNING and state.waits and not state.active_nodes:
            self.set_run(RunStatus.WAITING)
        elif state.status is RunStatus.WAITING and state.active_nodes and not state.held:
            self.set_run(RunStatus.RUNNING)

    def follow(self, node: TaskNode, current: NodeState, output: Mapping[str, Any]) -> None:
        """A task succeeded: merge its output (accumulating keys by their reducers) and
        take the edge its definition picks."""
        try:
            merged = reduced(self.definition.reducers, self.state.vars, output)
        except ReducerMismatch as exc:  # nothing of the output is merged
            self.node_failure(node, current, ErrorClass.PERMANENT, f"{exc.code}: {exc}")
            return
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

    def idle_too_long(self) -> bool:
        """Did the run sit still for longer than ``on_resume.after`` before this step (a
        wake from a wait, a long retry backoff, a rewind to an old state)? Then the node
        it dispatches checks the plan first, as after a crash."""
        on_resume, since = self.definition.on_resume, self.still_since
        if on_resume is None or on_resume.after is None or since is None:
            return False
        return self.at - since >= on_resume.after.total_seconds()

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
        if isinstance(node, TaskNode) and node.child is not None:
            if not self.start_child(node, iteration, attempt):
                return
        else:
            resumed = resumed or self.idle_too_long()
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

    def start_child(self, node: TaskNode, iteration: int, attempt: int) -> bool:
        """Start the child run that executes ``node``; False if it may not (nested too
        deep), and the node has failed instead."""
        assert node.child is not None
        run_id = self.state.run_id
        depth = (self.state.parent or {}).get("depth", 0) + 1
        current = self.state.nodes[node.id]
        if depth > MAX_DEPTH:
            self.node_failure(
                node,
                current,
                ErrorClass.PERMANENT,
                f"child workflow {node.child.workflow!r} would nest {depth} runs deep "
                f"(at most {MAX_DEPTH})",
            )
            return False
        child = child_run_id(run_id, node.id, iteration, attempt)
        self.state.nodes[node.id] = replace(current, child=child)
        self.commands.append(
            StartChild(
                node=node.id,
                iteration=iteration,
                attempt=attempt,
                run_id=child,
                correlation_id=correlation_id(run_id, node.id, iteration, attempt),
                workflow=node.child.workflow,
                version=node.child.version,
                input=picked(node.child.input, self.state.vars),
                budget=allowance(self.definition, self.state, node.id) or None,
                depth=depth,
            )
        )
        return True

    def notify_parent(self) -> None:
        """This child run has ended: tell its parent's node, with what it spent."""
        state, parent = self.state, self.state.parent
        assert parent is not None
        finished = ChildFinished(
            at=self.at,
            node=parent["node"],
            iteration=parent["iteration"],
            attempt=parent["attempt"],
            child_run_id=state.run_id,
            correlation_id=parent["correlation_id"],
            status=state.status.value,
            output=state.vars if state.status is RunStatus.SUCCEEDED else None,
            reason=state.reason,
            charges=dict(state.spent) or None,
        )
        self.commands.append(NotifyParent(parent["run_id"], event_to_dict(finished)))

    def charge(self, current: NodeState, charges: Mapping[str, float] | None) -> NodeState:
        """Count what an execution spent against its visit and the run."""
        if not charges:
            return current
        self.state.spent = added(self.state.spent, charges)
        charged = replace(current, spent=added(current.spent, charges))
        self.state.nodes[current.node] = charged
        return charged

    def node_failure(
        self,
        node: AnyNode,
        current: NodeState,
        error_class: ErrorClass,
        message: str,
        *,
        timed_out: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        policy = node.retry
        if error_class is ErrorClass.TRANSIENT and current.attempt < policy.attempts:
            delay = (
                retry_after_s  # the server said when: its word, not our backoff
                if retry_after_s is not None and retry_after_s >= 0
                else retry_delay_s(
                    policy, self.state.run_id, node.id, current.iteration, current.attempt
                )
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
