"""A signal: the answer a wait node was waiting for, or (a ``recovery.*`` signal) an
operator's decision about a held node.

A signal nobody waits for is refused (it raises), never ignored: the sender must learn
that it changed nothing. One that was already applied (same ``signal_id``) is ignored.
"""

from __future__ import annotations

from cairn.decider.moves import Moves
from cairn.decider.step import DECISIONS_KEY, RECOVERY_PREFIX, timer_id
from cairn.errors import EventRejected, NotWaiting, UnknownSignal
from cairn.model.definition import WaitNode
from cairn.model.events import SignalReceived
from cairn.model.state import TimerKind
from cairn.model.statuses import NodeStatus, RunStatus


def signal_received(step: Moves, event: SignalReceived) -> str | None:
    state = step.state
    if event.signal_id and event.signal_id in state.signals_seen:
        return f"signal {event.signal_id!r} was already applied"
    if event.name.startswith(RECOVERY_PREFIX):
        return step.resolve_hold(event)
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
    node = step.definition.nodes[waiting.node]
    assert isinstance(node, WaitNode)
    target = node.signals.get(event.name)
    if target is None:
        raise UnknownSignal(f"wait {node.id!r} accepts {sorted(node.signals)}, not {event.name!r}")
    if event.signal_id:
        state.signals_seen.append(event.signal_id)
    step.disarm(timer_id(TimerKind.WAIT, node.id, waiting.iteration))
    step.set_node(waiting, NodeStatus.SUCCEEDED)
    decisions = dict(state.vars.get(DECISIONS_KEY) or {})
    decisions[node.id] = {
        "signal": event.name,
        "payload": dict(event.payload or {}),
        "actor": event.actor,
        "at": event.at,
    }
    state.vars[DECISIONS_KEY] = decisions
    step.enter(target, node.id, f"signal:{event.name}")
    return None
