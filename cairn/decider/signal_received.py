"""A signal: the answer a wait node was waiting for, or (a ``recovery.*`` signal) an
operator's decision about a held node.

A signal nobody waits for is refused (it raises), never ignored: the sender must learn
that it changed nothing. One that was already applied (same ``signal_id``) is ignored.

Which wait it answers: the one it names (``wait``), else the only open wait that takes
a signal of its name — two parallel branches may wait at once. The wait's rules are the
decider's to keep, so that a replay of the log keeps them too:

- ``approvers``: only those may decide it (``role:<role>`` — that role or a higher one —
  or a principal); anyone else is refused (:class:`~cairn.errors.Forbidden`), nothing
  written;
- ``response``: the payload must match the signal's JSON Schema (the answer may be
  edited, within it); one that does not is refused (:class:`~cairn.errors.InvalidInput`);
- ``quorum``: the signal takes effect once that many distinct principals sent it; each
  earlier vote is recorded on the wait (a principal voting twice counts once);
- ``accept_early``: a signal that arrives before the wait opens is kept — one per wait —
  and applied when it opens (:meth:`~cairn.decider.moves.Moves.open_wait`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from functools import cache
from typing import TYPE_CHECKING, NoReturn

from cairn.decider.moves import Moves
from cairn.errors import EventRejected, Forbidden, InvalidInput, NotWaiting, UnknownSignal
from cairn.model.awaiting import RECOVERY_PREFIX
from cairn.model.definition import WaitNode
from cairn.model.events import SignalReceived
from cairn.model.state import NodeState
from cairn.model.statuses import RunStatus

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

# Roles from the least to the most allowed: ``role:approver`` admits operators and admins.
ROLE_ORDER = ("viewer", "approver", "operator", "admin")


def signal_received(step: Moves, event: SignalReceived) -> str | None:
    state = step.state
    if event.signal_id and event.signal_id in state.signals_seen:
        return f"signal {event.signal_id!r} was already applied"
    if event.name.startswith(RECOVERY_PREFIX):
        return step.resolve_hold(event)
    if state.status not in (RunStatus.RUNNING, RunStatus.WAITING):
        _not_waiting(step, event)
    found = _wait_for(step, event)
    if found is None:
        return _early(step, event)
    waiting, node = found
    target = node.signals.get(event.name)
    if target is None:
        raise UnknownSignal(f"wait {node.id!r} accepts {sorted(node.signals)}, not {event.name!r}")
    _check_approver(node, event)
    _check_response(node, event)
    if event.signal_id:
        state.signals_seen.append(event.signal_id)
    if node.quorum > 1:
        votes = _vote(waiting, event)
        waiting = replace(waiting, votes=votes)
        if len(votes[event.name]) < node.quorum:  # a vote towards it: the wait stays open
            state.nodes[waiting.node] = waiting
            return None
    step.decide_wait(waiting, node, event, target)
    return None


def _wait_for(step: Moves, event: SignalReceived) -> tuple[NodeState, WaitNode] | None:
    """The open wait ``event`` answers, or None if it answers none open now."""
    waits: list[tuple[NodeState, WaitNode]] = []
    for open_wait in step.state.waits:
        declared = step.definition.nodes[open_wait.node]
        if isinstance(declared, WaitNode):
            waits.append((open_wait, declared))
    if event.wait is not None:
        named = [(w, node) for w, node in waits if w.node == event.wait]
        if not named:
            return None
        waiting, node = named[0]
        if event.iteration is not None and event.iteration != waiting.iteration:
            raise EventRejected(
                f"signal {event.name!r} answers wait {event.wait!r} (visit {event.iteration}), "
                f"which is already decided; it now waits at visit {waiting.iteration}"
            )
        return waiting, node
    taking = [(w, node) for w, node in waits if event.name in node.signals]
    if len(taking) > 1:
        raise EventRejected(
            f"signal {event.name!r} could answer any of the waits "
            f"{sorted(w.node for w, _node in taking)}: name the one it answers (node)"
        )
    if taking:
        return taking[0]
    if len(waits) == 1:
        return waits[0]  # an unknown signal: refused by name below
    return None


def _not_waiting(step: Moves, event: SignalReceived) -> NoReturn:
    state = step.state
    raise NotWaiting(
        f"run {state.run_id} is {state.status.value}, not waiting; signal {event.name!r} refused"
    )


def _early(step: Moves, event: SignalReceived) -> str | None:
    """A signal for a wait not open (yet): kept if that wait accepts early signals."""
    state = step.state
    node = step.definition.nodes.get(event.wait) if event.wait is not None else None
    if not isinstance(node, WaitNode) or not node.accept_early:
        if event.wait is not None and state.waits:
            raise EventRejected(
                f"signal {event.name!r} answers wait {event.wait!r}, which is not open; the "
                f"run waits at {sorted(w.node for w in state.waits)}"
            )
        _not_waiting(step, event)
    if event.name not in node.signals:
        raise UnknownSignal(f"wait {node.id!r} accepts {sorted(node.signals)}, not {event.name!r}")
    if node.id in state.early:
        raise EventRejected(
            f"wait {node.id!r} keeps one early signal, and has one "
            f"({state.early[node.id]['name']!r}): this one is refused"
        )
    _check_response(node, event)
    if event.signal_id:
        state.signals_seen.append(event.signal_id)
    kept = {k: v for k, v in asdict(event).items() if k not in ("wait", "iteration")}
    state.early[node.id] = kept
    return None


def _check_approver(node: WaitNode, event: SignalReceived) -> None:
    if not node.approvers or may_decide(node.approvers, event.actor, event.role):
        return
    raise Forbidden(
        f"{event.actor or 'an unknown actor'} may not decide wait {node.id!r}: its "
        f"approvers are {', '.join(node.approvers)}"
    )


def may_decide(approvers: tuple[str, ...], actor: str | None, role: str | None) -> bool:
    """Whether ``actor`` (``<kind>:<name>``), of ``role``, is one of ``approvers``."""
    name = (actor or "").partition(":")[2]
    rank = ROLE_ORDER.index(role) if role in ROLE_ORDER else -1
    for approver in approvers:
        kind, _sep, wanted = approver.partition(":")
        if kind == "role" and wanted in ROLE_ORDER:
            if rank >= ROLE_ORDER.index(wanted):
                return True
        elif approver in (actor, name):
            return True
    return False


def _check_response(node: WaitNode, event: SignalReceived) -> None:
    schema = node.response.get(event.name)
    if schema is None:
        return
    payload = dict(event.payload or {})
    problems = sorted(_validator(json.dumps(schema, sort_keys=True)).iter_errors(payload), key=str)
    if problems:
        where = "/".join(str(part) for part in problems[0].absolute_path) or "payload"
        raise InvalidInput(
            f"signal {event.name!r} of wait {node.id!r}: {where}: {problems[0].message} "
            "(its response schema)"
        )


@cache
def _validator(schema: str) -> Draft202012Validator:
    # Imported by the first signal with a response schema, not by every process that
    # imports the decider (a command line's start).
    from jsonschema import Draft202012Validator  # noqa: PLC0415

    return Draft202012Validator(json.loads(schema))


def _vote(waiting: NodeState, event: SignalReceived) -> dict[str, list[str]]:
    votes = {name: list(actors) for name, actors in (waiting.votes or {}).items()}
    actors = votes.setdefault(event.name, [])
    voter = event.actor or f"signal:{event.signal_id}"
    if voter not in actors:
        actors.append(voter)
    return votes
