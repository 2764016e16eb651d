"""Stage 2, admit: the node's lease (an older attempt's is superseded), and what its
flow control says — its dependencies' circuits, its concurrency pools. An irreversible
node waits for its slots here, before its one claim; a reversible one in :mod:`hold`,
after its takeover is counted. Parked or held elsewhere, it holds nothing.

A node run on in a fused chain is admitted by :func:`admit_successor`: the same pools and
circuits, for the chain's holder, but it never parks — a full pool ends the chain before
it, and its message goes out with the commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn.engine.slots import Pool, holder_of
from cairn.lease.port import Lease
from cairn.model.definition import TaskNode
from cairn.model.keys import Claim
from cairn.model.messages import NodeMessage
from cairn.model.state import RunState
from cairn.workers.circuits import Guarded
from cairn.workers.setup import Claimed, Recorders
from cairn.workers.step.handled import Handled
from cairn.workers.step.read import Read

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner

log = logging.getLogger("cairn.workers.runner")


@dataclass(frozen=True)
class Admitted:
    """A node with its lease, the pools it takes slots of (for ``holder``, the lease) and
    the circuits it reports to."""

    read: Read
    lease: Lease
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


def admit(runner: NodeRunner, read: Read, handed: Lease | None = None) -> Admitted | Handled:
    """``handed``: its lease, already claimed as the step before it let its own go."""
    message = read.message
    lease = handed if handed is not None else runner._acquire(message, read.execution.fence)
    if lease is None:
        return Handled.LEASE_HELD
    if lease.superseded:
        log.info("%s attempt %d supersedes an older attempt's lease", message.key, message.attempt)
    pools, guarded = runner.setup.admission(
        read.definition, read.node, message, read.run, read.state
    )
    admitted = Admitted(read, lease, pools, guarded)
    # An irreversible node's first claim is its last: it waits for its slot before.
    if read.irreversible:
        try:
            entered = enter(runner, admitted, message)
        except BaseException:
            runner.leases.release(lease)
            raise
        if not entered:
            runner.leases.release(lease)  # parked: it holds nothing
            return Handled.PARKED
    return admitted


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
