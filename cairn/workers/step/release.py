"""Stage 6, release: the heartbeat stopped, the lease let go (token-checked; marked
finished when the result is recorded), the chain's slots given back — whatever happened
before; for the message this worker runs next — the one its commit kept, or the next
sibling its message carried — that execution's lease is claimed in the same round trip.
Then :func:`settle` says how the message ended: committed (or the failure it committed),
discarded, or stale."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from cairn import clock
from cairn.engine.optimistic import Completion
from cairn.lease.port import Handing
from cairn.lease.waits import delivered
from cairn.model.messages import NodeMessage
from cairn.workers.cache import invalidate
from cairn.workers.failed import Failed, failure_of
from cairn.workers.stale import record_stale
from cairn.workers.step.execute import Ran
from cairn.workers.step.handled import Handled
from cairn.workers.step.hold import Held

if TYPE_CHECKING:
    from cairn.limits.concurrency import Pool
    from cairn.workers.runner import NodeRunner

log = logging.getLogger("cairn.workers.runner")


def release(
    runner: NodeRunner,
    held: Held,
    ran: Ran | None,
    completion: Completion | Handled | None,
    *,
    then: Callable[[], NodeMessage | None] | None = None,
) -> Handing | None:
    """The lease the message this worker runs next took as this one's was let go (None:
    let go alone): the one its commit kept, else — the result recorded — the one ``then``
    takes (the next sibling its message carried)."""
    runner.heartbeats.drop(held.beat)
    lease = held.admitted.lease
    recorded = isinstance(completion, Completion) and completion.recorded
    kept = completion.kept if isinstance(completion, Completion) else None
    timings = ran.timings if ran is not None else {}
    handed = None
    if kept is None and recorded and then is not None:
        kept = _taken(then)
    try:
        if kept is not None and kept.attempt == 1:  # a first claim: no fence on record
            with delivered(clock.wall()):  # its wait starts at this commit
                handed = runner.leases.hand_on(
                    lease,
                    kept.lease_key,
                    runner.settings.lease_ttl,
                    timings=timings,
                    record=runner.lease_record(kept),
                )
        else:
            runner.leases.release(lease, finished=recorded, timings=timings)
    except Exception:  # the lease expires on its own; the next claims its own
        log.warning("releasing %s failed", lease.key, exc_info=True)
    leave(runner, [*held.admitted.pools, *held.chain.pools], held.chain.holder)
    return handed


def _taken(then: Callable[[], NodeMessage | None]) -> NodeMessage | None:
    try:
        return then()
    except Exception:  # taken after the release instead, or spilled: it runs either way
        log.warning("taking the next sibling failed", exc_info=True)
        return None


def leave(runner: NodeRunner, pools: list[Pool], holder: str) -> None:
    if not pools or runner.gate is None:
        return
    try:
        runner.gate.leave(sorted(set(pools)), holder)
    except Exception:  # the slot goes with the lease; the scheduler wakes the waiters
        log.warning("giving back the slots of %s failed", holder, exc_info=True)


def settle(
    runner: NodeRunner, held: Held, ran: Ran, completion: Completion | Handled
) -> Handled | Failed:
    if isinstance(completion, Handled):
        return completion
    message, fence = held.message, held.claimed.fence
    if not completion.recorded:
        if runner.reads.fenced_out(message.key, fence):
            record_stale(runner, message, fence, caught_by="fence")
            return Handled.LEASE_LOST
        log.info("result of %s discarded: %s", message.key, completion.reason)
        return Handled.DISCARDED
    claimed = held.claimed
    invalidate(
        runner.cache, claimed.run.namespace, claimed.definition, claimed.known.state.vars, ran.steps
    )
    for kept in held.chain.recorders:
        kept.checkpoints.forget()  # their results are committed
    return failure_of(ran.steps) or Handled.COMMITTED
