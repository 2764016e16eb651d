"""What people and other services ask of a running run: a signal (a wait's answer, or an
operator's decision about a held node), a cancel, a rollback. Each is checked before
anything is written, stamped with the database's clock, and applied as one step."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any

from cairn.decider import Decision
from cairn.decider.stopping import step_to_undo, undo_order
from cairn.engine.advance import Steps
from cairn.engine.reads import Reads
from cairn.errors import ConfirmationRequired, InvalidInput
from cairn.model.definition import Ref
from cairn.model.events import (
    CancelRequested,
    Event,
    RollbackRequested,
    SignalReceived,
    stamped,
)
from cairn.model.payloads import storable_json


class Requests:
    def __init__(self, steps: Steps, reads: Reads, *, limit_bytes: int) -> None:
        self.steps = steps
        self.reads = reads
        self.limit_bytes = limit_bytes

    def signal(
        self,
        run_id: str,
        name: str,
        payload: Mapping[str, Any] | None = None,
        *,
        actor: str | None = None,
        signal_id: str | None = None,
        node: str | None = None,
        iteration: int | None = None,
        comment: str | None = None,
        role: str | None = None,
    ) -> Decision:
        """Deliver a decision from outside: a wait's signal, or an operator's recovery
        decision about a held node (``recovery.retry|complete|fail``). The same
        ``signal_id`` twice is applied once (the second decision says ``ignored``); a
        signal the run cannot take raises and writes nothing. ``node`` (and
        ``iteration``) name the wait or held node it answers."""
        if payload is not None and not isinstance(payload, Mapping):
            raise InvalidInput("a signal's payload is a JSON object")
        storable_json(payload or {}, what="the signal's payload", limit_bytes=self.limit_bytes)
        received = SignalReceived(
            at=0.0,
            name=name,
            signal_id=signal_id or uuid.uuid4().hex,
            payload=dict(payload) if payload is not None else None,
            actor=actor,
            wait=node,
            iteration=iteration,
            comment=comment,
            role=role,
        )
        return self._apply_now(run_id, received)

    def cancel(self, run_id: str, reason: str, *, actor: str | None = None) -> Decision:
        """Cancel a run: it moves to ``cancelling`` at once (nothing new is dispatched,
        queued nodes become no-ops, running handlers see ``ctx.cancelled``), and ends
        ``cancelled`` once its running nodes have stopped or ``cancel_timeout`` passed.
        A finished run raises :class:`IllegalTransition` and nothing is written; a second
        cancel changes nothing (``ignored``)."""
        return self._apply_now(run_id, CancelRequested(at=0.0, reason=reason, actor=actor))

    def rollback(
        self,
        run_id: str,
        reason: str,
        *,
        actor: str | None = None,
        confirm: bool = False,
        to_seq: int | None = None,
        step: str | None = None,
        step_iteration: int | None = None,
    ) -> Decision:
        """Undo a started, unfinished run: stop it, compensate every step that took
        effect (last first), end ``rolled_back`` — or, ``to_seq``, only the steps after
        that event, then resume from the state the run had there; or, ``step``, only that
        step's change, then resume from where the run was. It must be ``confirm``-ed;
        otherwise, and for a run, seq or step that cannot be rolled back, it raises and
        writes nothing."""
        if to_seq is not None and step is not None:
            raise InvalidInput("roll back to a seq or one step, not both")
        if not confirm:
            what = (
                f"the steps after seq {to_seq}"
                if to_seq is not None
                else (f"the step {step}" if step is not None else "every step")
            )
            raise ConfirmationRequired(
                f"rolling back run {run_id} stops it and compensates {what} that took "
                "effect; confirm it (--yes, confirm=True)"
            )
        rewind = None if to_seq is None else self.reads.checkpoint(run_id, to_seq).to_dict()
        requested = RollbackRequested(
            at=0.0,
            reason=reason,
            actor=actor,
            to_seq=to_seq,
            rewind=rewind,
            step=step,
            step_iteration=step_iteration,
        )
        return self._apply_now(run_id, requested)

    def rollback_plan(
        self,
        run_id: str,
        *,
        to_seq: int | None = None,
        step: str | None = None,
        step_iteration: int | None = None,
    ) -> list[dict[str, Any]]:
        """The compensations a rollback asked now would run, in order (each step's node,
        visit and compensation), refused as the rollback itself would be. Steps still
        running may yet take effect before they stop: they would be undone too."""
        if to_seq is not None and step is not None:
            raise InvalidInput("roll back to a seq or one step, not both")
        _row, definition, state = self.reads.load(run_id)
        compensable = state.compensable
        if step is not None:
            undone = undo_order([step_to_undo(compensable, step, step_iteration)])
        elif to_seq is not None:
            kept = self.reads.checkpoint(run_id, to_seq).compensable
            undone = undo_order(compensable, kept)
        else:
            undone = undo_order(compensable)
        return [
            {
                "node": done.node,
                "iteration": done.iteration,
                "compensation": _path(definition.node(done.node).compensate),
            }
            for done in undone
        ]

    def _apply_now(self, run_id: str, event: Event) -> Decision:
        """Apply a request, stamped with the database's clock."""
        decision = self.steps.apply(run_id, partial(stamped, event))
        assert decision is not None  # no ``before`` that could decline
        return decision


def _path(ref: Ref | None) -> str | None:
    return ref.path if ref is not None else None
