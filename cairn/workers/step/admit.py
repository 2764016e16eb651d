"""Stage 2, admit: the node's lease (an older attempt's is superseded) and the heartbeat
that renews it from then on — the claim, a takeover and the slots that come before the
handler may each wait out an outage of PostgreSQL longer than the lease lives — and
what its flow control says: its dependencies' circuits, its concurrency pools. An
irreversible node waits for its slots here, before its one claim; a reversible one in
:mod:`hold`, after its takeover is counted. Parked or held elsewhere, it holds nothing.

A node run on in a fused chain is admitted by :func:`admit_successor`: the same pools and
circuits, for the chain's holder, but it never parks — a full pool ends the chain before
it, and its message goes out with the commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from cairn.lease.heartbeat import Beat
from cairn.lease.port import Handing, Lease
from cairn.limits.concurrency import Pool, holder_of
from cairn.model.definition import TaskNode
from cairn.model.events import Phase
from cairn.model.keys import Claim
from cairn.model.messages import NodeMessage
from cairn.model.state import RunState
from cairn.workers.circuit_watch import Guarded
from cairn.workers.setup import Claimed, Recorders
from cairn.workers.step.handled import Handled
from cairn.workers.step.read import Read

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner

log = logging.getLogger("cairn.workers.runner")


@dataclass(frozen=True)
class Admitted:
    """A node with its lease and the heartbeat renewing it, the pools it takes slots of
    (for ``holder``, the lease) and the circuits it reports to."""

    read: Read
    lease: Lease
    beat: Beat
    pools: list[Pool]
    guarded: Guarded | None

    @property
    def holder(self) -> str:
        return holder_of(self.lease.key, self.lease.token)


@dataclass
class Chain:
    """What a message's execution and the nodes it runs on after an ephemeral one share:
    the holder of their slots, the claim their records are fenced by (the first's), and
    whether that one runs again (a chain cut short may have run some of them before);
    the pools they took and their recorders, to give back and forget at the end."""

    holder: str
    claim: Claim
    resumed: bool
    pools: list[Pool] = field(default_factory=list)
    recorders: list[Recorders] = field(default_factory=list)


def admit(runner: NodeRunner, read: Read, handed: Handing | None = None) -> Admitted | Handled:
    """``handed``: its lease, claimed as the step before it let its own go (the answer
    read now: the step was read meanwhile)."""
    message = read.message
    lease = taken(handed) if handed is not None else None
    if lease is None:
        lease = runner._acquire(message, read.execution.fence)
    if lease is None:
        return Handled.LEASE_HELD
    if lease.superseded:
        log.info("%s attempt %d supersedes an older attempt's lease", message.key, message.attempt)
    beat = runner.heartbeats.hold(
        lease,
        runner.settings.heartbeat_interval,
        # Compensations are never cancelled: they are how a cancel undoes work.
        cancel_requested=partial(runner.reads.stop_requested, message.key, message.attempt)
        if message.phase is Phase.RUN
        else None,
    )
    try:
        admitted = _flow_controlled(runner, read, lease, beat)
    except BaseException:
        let_go(runner, lease, beat)
        raise
    if admitted is None:
        let_go(runner, lease, beat)  # parked: it holds nothing
        return Handled.PARKED
    return admitted


def _flow_controlled(runner: NodeRunner, read: Read, lease: Lease, beat: Beat) -> Admitted | None:
    """The node admitted under its circuits and pools; None if, irreversible, it was
    parked waiting for a slot (its first claim is its last: it waits before)."""
    message = read.message
    pools, guarded = runner.setup.admission(
        read.definition, read.node, message, read.run, read.state
    )
    admitted = Admitted(read, lease, beat, pools, guarded)
    if read.irreversible and not enter(runner, admitted, message):
        return None
    return admitted


def taken(handed: Handing) -> Lease | None:
    """The lease handed on, or None if the hand-on failed (the step claims its own:
    held still by the claim whose answer was lost, it waits for it to expire)."""
    try:
        return handed.taken()
    except Exception:
        log.warning("handing a lease on failed", exc_info=True)
        return None


def let_go(runner: NodeRunner, lease: Lease, beat: Beat) -> None:
    """A node that will not run after all: its heartbeat stopped, its lease let go."""
    runner.heartbeats.drop(beat)
    runner.leases.release(lease)


def enter(runner: NodeRunner, admitted: Admitted, message: NodeMessage) -> bool:
    """A slot of each pool, or False: parked, to let its lease go and hold nothing."""
    gate = runner.gate
    if gate is None or not (admitted.pools or message.woken):
        return True
    namespace = admitted.read.run.namespace
    return runner._through_outages(
        f"taking slots for {message.key}",
        lambda: gate.enter(message, admitted.pools, admitted.holder, namespace, message.priority),
    )


def admit_successor(
    runner: NodeRunner,
    claimed: Claimed,
    chain: Chain,
    *,
    message: NodeMessage,
    node: TaskNode,
    state: RunState,
) -> tuple[bool, Guarded | None]:
    """A node to run on in the chain: a slot of each of its pools (and of its
    circuits' that are not closed) for the chain's holder — those it holds count
    already — or False, taking none: one is full (or a circuit open)."""
    pools, guarded = runner.setup.admission(claimed.definition, node, message, claimed.run, state)
    gate = runner.gate
    if not pools or gate is None:
        return True, guarded
    full = runner._through_outages(
        f"taking slots for {message.key}", lambda: gate.slots.take(pools, chain.holder)
    )
    if full is not None:
        log.info("%s not run on: its pool %s is full; it waits for a slot", message.key, full)
        return False, None
    chain.pools += pools
    return True, guarded
