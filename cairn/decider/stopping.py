"""How a run stops: failing, finishing, cancelling, compensating (the saga), rolling
back — the whole run, to a checkpoint, or one step."""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

from cairn.decider.step import (
    FORK,
    OPERATOR,
    REWIND,
    Step,
    Transition,
    outcome_node,
    retry_delay_s,
    timer_id,
)
from cairn.errors import EventRejected, IllegalTransition
from cairn.model.commands import CancelNode, DetachNode, Dispatch, FinishRun, HoldExecution
from cairn.model.definition import ErrorClass, RetryPolicy
from cairn.model.events import (
    CancelRequested,
    NodeFailed,
    NodeSucceeded,
    Phase,
    RollbackRequested,
    RunForked,
)
from cairn.model.state import (
    Compensation,
    CompletedStep,
    NodeState,
    RunState,
    TimerKind,
    TimerState,
)
from cairn.model.statuses import NodeStatus, RunStatus, advance_node


def undo_order(
    compensable: Sequence[CompletedStep], kept: Collection[CompletedStep] = ()
) -> tuple[CompletedStep, ...]:
    """What compensating a run runs, in order — the last step that took effect first: every
    step of ``compensable`` but those a checkpoint rolled back to had taken (``kept``)."""
    return tuple(step for step in reversed(compensable) if step not in kept)


def step_to_undo(
    compensable: Sequence[CompletedStep], node: str, iteration: int | None
) -> CompletedStep:
    """The step a single-step rollback of ``node`` undoes: its latest visit unless named."""
    steps = [
        step
        for step in compensable
        if step.node == node and (iteration is None or step.iteration == iteration)
    ]
    if not steps:
        raise EventRejected(
            f"{node}{'' if iteration is None else f'#{iteration}'} has no change to undo: "
            "it is not a succeeded step with a compensation, or it was undone already"
        )
    return steps[-1]


class Stopping(Step):
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
        undone = step_to_undo(self.state.compensable, node, iteration)
        return {"node": undone.node, "iteration": undone.iteration}

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
        pending = undo_order(self.state.compensable)
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
        kept = RunState.from_dict(state.cancel["rewind"]).compensable
        undo = undo_order(state.compensable, kept)
        self.stop_all(reason)
        state.compensable = [s for s in state.compensable if s in kept]
        self.set_run(RunStatus.COMPENSATING)  # even with nothing to undo: never un-cancel
        state.compensation = Compensation(undo, RunStatus.RUNNING, reason, rewind=True)
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
        # The anomaly detectors remember what they had seen there; what they caught
        # since (``anomalies``) stays in the history.
        state.anomaly = target.anomaly
        state.nodes = {k: n for k, n in target.nodes.items() if n.status.terminal}
        state.signals_seen = list(dict.fromkeys([*target.signals_seen, *state.signals_seen]))
        state.cancel, state.reason, state.compensation = None, None, None
        self.still_since = target.updated_at
        self.set_run(RunStatus.RUNNING)
        for node in in_progress:
            if self.moving:
                self.enter(node.node, REWIND, "rewind")

    def forked(self, event: RunForked) -> str | None:
        """A forked run's first event: it starts from its parent's checkpoint (``state``,
        patched), as a rollback to a checkpoint resumes — what was in progress there
        starts again, each as a new visit; visits, spending and the agent context carry
        over. The parent's effects stay the parent's: nothing it did is compensable here,
        and the fork is nobody's child run."""
        state = self.state
        if state.status is not RunStatus.PENDING:
            raise IllegalTransition(
                "run",
                state.run_id,
                state.status.value,
                RunStatus.RUNNING.value,
                "the run has already started",
            )
        target = RunState.from_dict(event.state)
        in_progress = restarted_by_fork(target)
        if (
            target.status not in (RunStatus.RUNNING, RunStatus.WAITING)
            or any(not join.done for join in target.joins.values())
            or not in_progress
        ):
            raise EventRejected(
                f"a fork starts from a checkpoint (a going run with something in progress, "
                f"outside a parallel section); the state at seq {event.fork_seq} of run "
                f"{event.parent_run_id} is {target.status.value}"
            )
        state.vars, state.messages = dict(target.vars), list(target.messages)
        state.sessions, state.artifacts = dict(target.sessions), dict(target.artifacts)
        state.nodes = {k: n for k, n in target.nodes.items() if n.status.terminal}
        state.visits, state.joins = dict(target.visits), dict(target.joins)
        state.spent, state.budget = dict(target.spent), target.budget
        state.signals_seen = list(target.signals_seen)
        state.anomaly, state.anomalies = target.anomaly, list(target.anomalies)
        state.patches = dict(target.patches)  # it passed the same points on the same code
        state.started_at = event.at
        self.still_since = target.updated_at
        for node in in_progress:
            if self.moving:
                self.enter(node.node, FORK, "fork")
        return None

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
        if not settled:
            if event.error_class is ErrorClass.TRANSIENT and current.attempt < policy.attempts:
                self.retry_compensation(event, compensation, current, policy)
            else:
                self.hold_compensation(event, current)
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

    def retry_compensation(
        self,
        event: NodeFailed,
        compensation: Compensation,
        current: NodeState,
        policy: RetryPolicy,
    ) -> None:
        """A transient failure with attempts left: the compensation retries after the
        policy's delay."""
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

    def hold_compensation(self, event: NodeFailed, current: NodeState) -> None:
        """A compensation that failed for good: held for an operator to decide."""
        reason = (
            f"compensation failed ({event.error_class.value}: {event.message}) and "
            "its retries are exhausted"
        )
        self.set_compensation(
            self.moved(current, NodeStatus.HELD, error_class=event.error_class.value, error=reason)
        )
        self.commands.append(
            HoldExecution(event.node, event.iteration, event.attempt, Phase.COMPENSATE)
        )
        self.transitions.append(Transition(event.node, "held", OPERATOR))

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


def restarted_by_fork(state: RunState) -> list[NodeState]:
    """What a fork from ``state`` starts again, each as a new visit: what was in
    progress there (dispatched, not finished)."""
    return [node for node in state.nodes.values() if node.dispatched and not node.status.terminal]
