"""What waits for an operator: a node held after losing its worker (or a compensation
that failed for good), the operator's recovery decision; and re-planning on resume."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cairn.decider.step import OPERATOR, Step, Transition
from cairn.errors import EventRejected, NotWaiting, UnknownSignal
from cairn.model.awaiting import RECOVERY_SIGNALS
from cairn.model.commands import Dispatch, HoldExecution, SettleExecution
from cairn.model.definition import AnyNode, ErrorClass
from cairn.model.events import (
    NodeFailed,
    NodeHeld,
    NodeSucceeded,
    Phase,
    PlanInvalidated,
    SignalReceived,
)
from cairn.model.state import NodeState
from cairn.model.statuses import NodeStatus, RunStatus


class Holds(Step):
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
        current, phase = self.held_execution(event)
        payload = dict(event.payload or {})
        output = payload.get("output", {})
        if not isinstance(output, Mapping):
            raise EventRejected("recovery.complete takes the node's output as a JSON object")
        if event.signal_id:
            self.state.signals_seen.append(event.signal_id)
        node = self.definition.nodes[current.node]
        self.transitions.append(Transition(OPERATOR, event.name, node.id))
        if event.name == "recovery.retry":
            self.retry_held(node, current, phase)
            return None
        return self.settle_held(event, node, current, phase, output)

    def held_execution(self, event: SignalReceived) -> tuple[NodeState, Phase]:
        """The one held execution a recovery signal decides on, or why it is refused."""
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
        return held[0]

    def retry_held(self, node: AnyNode, current: NodeState, phase: Phase) -> None:
        """``recovery.retry``: a new attempt of the held execution, in its own phase."""
        attempt = current.attempt + 1
        if phase is Phase.COMPENSATE:
            self.set_compensation(
                self.moved(current, NodeStatus.SCHEDULED, attempt=attempt, error=None)
            )
            self.commands.append(Dispatch(node.id, current.iteration, attempt, phase, resumed=True))
        else:
            self.schedule(node, current.iteration, attempt, current, resumed=True)
        self.resume_run()

    def settle_held(
        self,
        event: SignalReceived,
        node: AnyNode,
        current: NodeState,
        phase: Phase,
        output: Mapping[str, Any],
    ) -> str | None:
        """``recovery.complete`` or ``recovery.fail``: the held execution's outcome as the
        operator vouches for it."""
        # Settled by the operator: the execution ends as if its worker had reported it.
        running = self.moved(current, NodeStatus.RUNNING, error=None)
        if phase is Phase.COMPENSATE:
            self.set_compensation(running)
        else:
            self.state.nodes[current.node] = running
        self.resume_run()
        iteration, attempt = current.iteration, current.attempt
        if event.name == "recovery.complete":
            self.commands.append(
                SettleExecution(node.id, iteration, phase, NodeStatus.SUCCEEDED, result=output)
            )
            return self.node_succeeded(
                NodeSucceeded(event.at, node.id, iteration, attempt, output, phase)
            )
        payload = event.payload or {}
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
        if self.state.status is RunStatus.WAITING and not (self.state.waits or self.state.held):
            self.set_run(RunStatus.RUNNING)
