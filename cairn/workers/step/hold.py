"""Stage 3, hold: the claim recorded where it must be (a takeover, an irreversible node),
a takeover from a holder that died counted as a recovery — and, too often, not run at
all — a claim after a lapsed one marked resumed, and a reversible node's slots taken;
all under the heartbeat admit started with the lease."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cairn.engine.recovery import Outcome
from cairn.lease.heartbeat import Beat
from cairn.model.definition import AnyNode
from cairn.model.keys import Claim, ExecutionKey
from cairn.model.messages import NodeMessage
from cairn.store.records import ExecutionClaim
from cairn.workers.setup import Claimed
from cairn.workers.step.admit import Admitted, Chain, enter
from cairn.workers.step.handled import Handled

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner

log = logging.getLogger("cairn.workers.runner")


@dataclass(frozen=True)
class Held:
    """A node about to run: its message (marked resumed if it runs again), what it runs
    under (run, definition, state, fence, heartbeat) and what its chain shares."""

    admitted: Admitted
    message: NodeMessage
    claimed: Claimed
    chain: Chain

    @property
    def beat(self) -> Beat:
        return self.claimed.beat


def hold(runner: NodeRunner, admitted: Admitted) -> Held | Handled:
    """The node held — or why it may not run (parked, its slots full): its lease and
    heartbeat are then the pipeline's to let go, as when this raises."""
    read, lease = admitted.read, admitted.lease
    message, irreversible = read.message, read.irreversible
    recoveries = read.execution.recoveries
    if lease.fence > 1 or irreversible:
        claim = _claim(runner, message.key, message.attempt, lease.fence, first=irreversible)
        if claim is None:
            # Finished meanwhile, or a newer claim took it; or, irreversible, claimed before.
            return Handled.UNCONFIRMED if irreversible else Handled.ALREADY_DONE
        # Newer than the read: a sweep may have counted a recovery since, and settled it
        # in Redis before this lease was taken (then the lease cannot tell).
        recoveries = claim.recoveries
    if lease.took_over:
        settled = _take_over(runner, message, read.node)
        if settled is not None:
            return settled
    if not message.resumed and (lease.lapsed or recoveries):
        # Interrupted work, run again — whichever copy of its message got here first,
        # and whether or not the sweep has counted the recovery yet: the handler sees
        # ctx.resumed, and the workflow's on_resume check applies.
        message = replace(message, resumed=True)
    if not irreversible and not enter(runner, admitted, message):
        return Handled.PARKED
    claimed = Claimed(read.run, read.definition, read.known, lease.fence, admitted.beat)
    chain = Chain(
        admitted.holder, Claim(message.key, message.attempt, lease.fence), message.resumed
    )
    return Held(admitted, message, claimed, chain)


def _claim(
    runner: NodeRunner, key: ExecutionKey, attempt: int, fence: int, *, first: bool
) -> ExecutionClaim | None:
    """Record the claim in PostgreSQL before running: a takeover, so that the holder
    it replaced cannot commit; or an irreversible node's claim (``first``: none may
    have been recorded before), so that recovery knows it may have started. A
    reversible node's first claim is not recorded: that would cost every step a
    commit. None if it may not run."""
    return runner._through_outages(
        f"recording the claim of {key}",
        lambda: runner.executions.claim(key, attempt, fence, first=first),
    )


def _take_over(runner: NodeRunner, message: NodeMessage, node: AnyNode) -> Handled | None:
    """Its previous holder died holding the lease (it left its heartbeat record) and
    this claim, not the scheduler's sweep, found it: the same recovery, counted
    against CAIRN_MAX_RECOVERIES and in the run's history, and under the same rule —
    a node that has killed its worker too often fails (or is held) instead of
    running again. None: run it."""
    recoveries = runner._through_outages(
        f"counting the recovery of {message.key}",
        lambda: runner.executions.take_over(message.key, message.attempt),
    )
    if recoveries is None:
        return Handled.ALREADY_DONE  # it finished meanwhile
    outcome = runner.recovery.settle(
        message, node, claimed=True, died=True, recoveries=recoveries, worker=runner.worker
    )
    if outcome is Outcome.HELD:
        return Handled.UNCONFIRMED
    if outcome is Outcome.FAILED:
        return Handled.GAVE_UP
    try:
        runner.steps.record_recovery(
            message,
            cause="worker lost; taken over by a redelivered message",
            recoveries=recoveries,
        )
    except Exception:  # the history entry is best effort; the count is what binds
        log.warning("could not record the takeover of %s", message.key, exc_info=True)
    return None
