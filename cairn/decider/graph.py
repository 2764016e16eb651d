"""The decider: ``decide(definition, state, event) -> Decision``. Pure.

No I/O, no clock, no randomness: the time comes in on the event, jitter is derived from
the execution key, and the only code it calls besides its own is a branch's guard, which
the definition contract requires to be a pure function of the state. Every rule about how
a run moves lives in this package; the store, the workers and the scheduler carry out its
commands and feed it events, and none of them re-implements a rule.

An event the run must refuse (a signal nobody waits for, a cancel of a finished run)
raises a :class:`~cairn.errors.CairnError` before anything is decided. An event that is
harmless but out of date (a duplicate delivery, a result from an attempt that was
already given up on, a timer that was disarmed) is *ignored*: the decision carries the
unchanged state and says why.

This module holds the entry: which handler each kind of event goes to, and what the
decision hands back. How a run moves along the graph and what a node's result does are in
:mod:`~cairn.decider.moves` (:class:`~cairn.decider.moves.Moves`, with joins, stopping,
operator holds and the anomaly watch as parts of the same decision); signals and fired
timers in :mod:`~cairn.decider.signal_received` and :mod:`~cairn.decider.timer_fired`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cairn.decider.migration import migrated
from cairn.decider.moves import Moves
from cairn.decider.signal_received import signal_received
from cairn.decider.step import Transition
from cairn.decider.timer_fired import timer_fired
from cairn.errors import EventRejected
from cairn.model.commands import Command
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import (
    CancelRequested,
    ChildFinished,
    Event,
    NodeCancelled,
    NodeFailed,
    NodeHeld,
    NodeSucceeded,
    PlanInvalidated,
    RollbackRequested,
    RunForked,
    RunMigrated,
    RunStarted,
    SignalReceived,
    TimerFired,
)
from cairn.model.patches import with_answers
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` made of an event: the run's new state, the commands to carry
    out (dispatch a node, arm a timer, ...), the transitions taken, and — when the event
    changed nothing — why."""

    state: RunState
    commands: tuple[Command, ...] = ()
    transitions: tuple[Transition, ...] = ()
    ignored: str | None = None  # why the event changed nothing, if it did not


def decide(definition: WorkflowDefinition, state: RunState, event: Event) -> Decision:
    """Apply one event to a run; return the new state and what to do about it.

    ``state`` is not modified. Raises :class:`~cairn.errors.IllegalTransition` or an
    :class:`~cairn.errors.EventRejected` subclass when the event is not acceptable.
    """
    step = Moves(definition, state.copy(), event.at)
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise EventRejected(f"the decider does not know event type {type(event).__name__}")
    ignored = handler(step, event)
    if ignored is not None:
        return Decision(state=state, ignored=ignored)
    if isinstance(event, NodeSucceeded | NodeFailed) and event.patches:
        # What the step was told by ctx.patched is the run's answer from now on.
        step.state.patches = with_answers(step.state.patches, event.patches)
    if step.state.waits and step.state.status in (RunStatus.RUNNING, RunStatus.WAITING):
        step.settle_waiting()  # (runs only with a wait open: as before, for the rest)
    if step.state.status.terminal and not state.status.terminal and state.parent:
        step.notify_parent()
    step.state.steps += 1
    step.state.updated_at = event.at
    return Decision(step.state, tuple(step.commands), tuple(step.transitions))


_HANDLERS: dict[type[Event], Callable[[Moves, Any], str | None]] = {
    RunStarted: Moves.started,
    NodeSucceeded: Moves.node_succeeded,
    NodeFailed: Moves.node_failed,
    NodeCancelled: Moves.node_cancelled,
    NodeHeld: Moves.node_held,
    PlanInvalidated: Moves.plan_invalidated,
    ChildFinished: Moves.child_finished,
    SignalReceived: signal_received,
    TimerFired: timer_fired,
    CancelRequested: Moves.cancel_requested,
    RollbackRequested: Moves.rollback_requested,
    RunForked: Moves.forked,
    RunMigrated: migrated,
}


__all__ = ["Decision", "decide"]
