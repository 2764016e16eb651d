"""A synchronous test driver: feeds a definition's commands back to the decider.

It runs real handlers in-process (``handler(None, dict(state.vars))``), keeps the
outstanding dispatches and armed timers the decider asked for, and lets a test pick
which of them happen next. It is a test harness for the decider, not an executor.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.decider.graph import Decision, decide
from cairn.model.commands import ArmTimer, DisarmTimer, Dispatch
from cairn.model.definition import ErrorClass, TaskNode, WorkflowDefinition
from cairn.model.events import (
    CancelRequested,
    Event,
    NodeFailed,
    NodeSucceeded,
    Phase,
    RunStarted,
    SignalReceived,
    TimerFired,
)
from cairn.model.state import RunState


@dataclass
class Driver:
    definition: WorkflowDefinition
    run_id: str = "run-1"
    at: float = 1_000.0
    state: RunState = field(init=False)
    dispatched: list[Dispatch] = field(default_factory=list)
    timers: dict[str, float] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = RunState(self.run_id, self.definition.name, self.definition.version)

    def apply(self, event: Event) -> Decision:
        decision = decide(self.definition, self.state, event)
        self.state = decision.state
        self.decisions.append(decision)
        for command in decision.commands:
            if isinstance(command, Dispatch):
                self.dispatched.append(command)
            elif isinstance(command, ArmTimer):
                self.timers[command.timer_id] = command.due_at
            elif isinstance(command, DisarmTimer):
                self.timers.pop(command.timer_id, None)
        return decision

    def tick(self, seconds: float = 1.0) -> float:
        self.at += seconds
        return self.at

    def start(self, **inputs: Any) -> Decision:
        return self.apply(RunStarted(at=self.tick(), input=inputs))

    def take(self, node: str) -> Dispatch:
        """Remove and return the oldest outstanding dispatch of ``node``."""
        for index, command in enumerate(self.dispatched):
            if command.node == node:
                return self.dispatched.pop(index)
        raise AssertionError(f"{node} is not dispatched; outstanding: {self.outstanding}")

    @property
    def outstanding(self) -> list[str]:
        return [command.node for command in self.dispatched]

    def succeed(
        self,
        node: str,
        output: Mapping[str, Any] | None = None,
        messages: Sequence[Mapping[str, Any]] = (),
    ) -> Decision:
        """``node`` succeeded with ``output``, adding ``messages`` to the agent context."""
        command = self.take(node)
        return self.apply(
            NodeSucceeded(
                at=self.tick(),
                node=node,
                iteration=command.iteration,
                attempt=command.attempt,
                output=output,
                phase=command.phase,
                messages=tuple(messages),
            )
        )

    def run(self, node: str) -> Decision:
        """Execute ``node``'s real handler (or compensation) and report its result."""
        command = self.take(node)
        spec = self.definition.nodes[node]
        ref = (
            spec.compensate
            if command.phase is Phase.COMPENSATE
            else (spec.handler if isinstance(spec, TaskNode) else None)
        )
        assert ref is not None, f"{node} has nothing to run"
        output = ref.resolve()(None, dict(self.state.vars))
        if inspect.isawaitable(output):  # an async def handler
            output = asyncio.run(_awaited(output))
        return self.apply(
            NodeSucceeded(
                at=self.tick(),
                node=node,
                iteration=command.iteration,
                attempt=command.attempt,
                output=output,
                phase=command.phase,
            )
        )

    def fail(
        self,
        node: str,
        error_class: ErrorClass = ErrorClass.PERMANENT,
        message: str = "boom",
        *,
        retry_after_s: float | None = None,
    ) -> Decision:
        command = self.take(node)
        return self.apply(
            NodeFailed(
                at=self.tick(),
                node=node,
                iteration=command.iteration,
                attempt=command.attempt,
                error_class=error_class,
                message=message,
                phase=command.phase,
                retry_after_s=retry_after_s,
            )
        )

    def fire(self, prefix: str) -> Decision:
        """Fire the armed timer whose id starts with ``prefix``, at its due time."""
        matches = [timer for timer in self.timers if timer.startswith(prefix)]
        assert len(matches) == 1, f"timers matching {prefix!r}: {matches} of {self.timers}"
        due = self.timers.pop(matches[0])
        self.at = max(self.at, due)
        return self.apply(TimerFired(at=self.at, timer_id=matches[0]))

    def signal(self, name: str, signal_id: str = "", **kwargs: Any) -> Decision:
        return self.apply(
            SignalReceived(
                at=self.tick(), name=name, signal_id=signal_id or f"sig-{self.at}", **kwargs
            )
        )

    def cancel(self, reason: str = "user asked", actor: str | None = "alice") -> Decision:
        return self.apply(CancelRequested(at=self.tick(), reason=reason, actor=actor))

    def run_to_end(self, limit: int = 200) -> RunState:
        """Run every dispatched node's real handler until nothing is outstanding."""
        for _ in range(limit):
            if not self.dispatched:
                return self.state
            self.run(self.dispatched[0].node)
        raise AssertionError("the run did not settle")

    @property
    def path(self) -> list[tuple[str, str, str]]:
        return [(t.source, t.label, t.target) for d in self.decisions for t in d.transitions]


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
