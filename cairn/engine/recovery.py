"""What becomes of an execution whose worker was lost: run it again, hold it for a
person, or give up on it — one policy for every path that finds such an execution.

Two paths find them: the scheduler's recovery sweep (a lapsed claim, or an execution
dispatched long ago with no result and no lease), and a worker whose claim of a node
takes over from a holder that died (a redelivered or duplicate message got there
first). Both count the death against ``CAIRN_MAX_RECOVERIES`` in PostgreSQL, once, and
both ask :meth:`RecoveryPolicy.settle` before the node may run again, so a node that
kills its worker every time runs at most that many times, whichever path sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Protocol

from cairn.config import Settings
from cairn.decider import Decision
from cairn.engine.optimistic import Completion
from cairn.model.definition import AnyNode, ErrorClass, TaskNode
from cairn.model.events import Event, NodeFailed, NodeHeld, stamped
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.statuses import NodeStatus

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    RUN = "run"  # run it again
    HELD = "held"  # a person decides (the run waits)
    FAILED = "failed"  # given up on: a poison node


class RecoveryWrites(Protocol):
    """What settling a lost execution writes, through the normal write path: an event
    applied to its run, or its result completed (:class:`cairn.engine.advance.Steps`)."""

    def apply(self, run_id: str, make_event: Callable[[float], Event]) -> Decision | None: ...
    def complete(self, message: NodeMessage, outcome: NodeOutcome, worker: str) -> Completion: ...


@dataclass
class RecoveryPolicy:
    writes: RecoveryWrites
    settings: Settings

    def settle(
        self,
        message: NodeMessage,
        node: AnyNode | None,
        *,
        claimed: bool,
        died: bool,
        recoveries: int,
        worker: str,
    ) -> Outcome:
        """Decide, and carry out, what becomes of an execution that lost its worker:
        ``claimed`` if PostgreSQL recorded a claim (an irreversible node's, or a
        takeover), ``died`` if its holder died holding the lease, ``recoveries`` the
        deaths counted so far, this one included. :attr:`Outcome.RUN` leaves running it
        again to the caller."""
        reason = self.hold_reason(node, claimed=claimed, died=died, recoveries=recoveries)
        if reason is not None and self.hold(message, reason, recoveries):
            return Outcome.HELD
        if recoveries >= self.settings.max_recoveries:
            self.give_up(message, recoveries, worker=worker)
            return Outcome.FAILED
        return Outcome.RUN

    def hold_reason(
        self, node: AnyNode | None, *, claimed: bool, died: bool, recoveries: int
    ) -> str | None:
        """Why this recovery needs an operator, if it does."""
        if isinstance(node, TaskNode) and node.irreversible and claimed:
            lost = "its worker died running it" if died else "its worker was lost"
            return f"irreversible: {lost}, and it may have taken effect"
        if recoveries >= self.settings.max_recoveries and self.settings.on_max_recoveries == "hold":
            return (
                f"its worker died while running it {recoveries} times "
                "(CAIRN_MAX_RECOVERIES, CAIRN_ON_MAX_RECOVERIES=hold)"
            )
        return None

    def hold(self, message: NodeMessage, reason: str, recoveries: int) -> bool:
        """Stop recovering ``message``'s execution: the run waits for an operator. False
        if the run does not hold it (it is being cancelled: the node may run again, it
        stops before its handler)."""
        held = NodeHeld(
            at=0.0,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            phase=message.phase,
            reason=reason,
            recoveries=recoveries,
        )
        decision = self.writes.apply(message.run_id, partial(stamped, held))
        if decision is None or decision.ignored:
            return False
        log.error("%s held for an operator: %s", message.key, reason)
        return True

    def give_up(self, message: NodeMessage, recoveries: int, *, worker: str) -> None:
        """A poison node: its worker died every time. It fails like any permanent error
        (its error edge, or the run fails), through the normal completion path."""
        reason = (
            f"max_attempts: its worker died while running it {recoveries} times "
            "(CAIRN_MAX_RECOVERIES)"
        )
        event = NodeFailed(
            at=0.0,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            error_class=ErrorClass.PERMANENT,
            message=reason,
            phase=message.phase,
        )
        self.writes.complete(
            message,
            NodeOutcome(
                event, NodeStatus.FAILED, error_class=ErrorClass.PERMANENT.value, error=reason
            ),
            worker=worker,
        )
        log.error("%s: %s", message.key, reason)
