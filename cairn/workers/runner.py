"""Executing one node message: the worker's half of the write path, as a pipeline of
stages (:mod:`cairn.workers.step`) —

    read → admit → hold → execute → commit → release

each returning the next stage's input, or a :class:`Handled` that ends the message. A
message a worker is sent, one redelivered after its worker died (resumed), one the
embedded default runs in a thread, a node run on after an ephemeral one in the same
chain, the next step this worker continues with after a commit instead of publishing
it (:mod:`cairn.workers.step.continuation`) and the fork's branches a message carried
(:mod:`cairn.workers.step.siblings`) all pass through these same stages. A Celery
worker may hand an async node, once held, to its process's event loop (``hand_over``):
it is awaited there, and concluded — commit → release — by :mod:`cairn.workers.awaiting`,
with no pool slot held meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from cairn import clock
from cairn.config import Settings
from cairn.engine.code_faults import CodeMissing
from cairn.engine.grouping import awaited
from cairn.engine.optimistic import Completion
from cairn.engine.recovery import RecoveryPolicy
from cairn.engine.slots import SlotGate
from cairn.errors import UnknownNode
from cairn.lease.heartbeat import Heartbeats
from cairn.lease.port import Handing, Lease, Leases
from cairn.lease.waits import delivered
from cairn.limits.rates import Rates
from cairn.model.definition import ErrorClass, TaskNode
from cairn.model.messages import InvalidMessage, NodeMessage, siblings_from_header
from cairn.observe.sentry import node_scope, report_failure
from cairn.reconnect import is_outage, through_outages
from cairn.workers.cache import MemoryResultCache, ResultCache
from cairn.workers.circuit_watch import CircuitWatch
from cairn.workers.code_faults import CodeFaults
from cairn.workers.failed import Failed
from cairn.workers.ports import (
    ExecutionDoor,
    OutboxPart,
    PausedQueues,
    RunReads,
    StepCommits,
    StepParts,
)
from cairn.workers.setup import StepSetup
from cairn.workers.step.admit import admit, let_go, taken
from cairn.workers.step.commit import cancel_unstarted, commit
from cairn.workers.step.continuation import Continuation, next_to_run
from cairn.workers.step.execute import Awaitable, Ran, awaitable, execute
from cairn.workers.step.handled import Handled
from cairn.workers.step.hold import Held, hold
from cairn.workers.step.read import Unstarted, read
from cairn.workers.step.release import release, settle
from cairn.workers.step.siblings import Siblings, SpillTimer

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# Takes a held node to await on the process's loop; from then on, all it holds is its own.
HandOver = Callable[[Awaitable], None]

__all__ = ["Handled", "NodeRunner"]


@dataclass
class NodeRunner:
    parts: StepParts  # the engine's parts the stages use (cairn.runtime.step_parts)
    leases: Leases
    settings: Settings
    worker: str
    cache: ResultCache = field(default_factory=MemoryResultCache)
    # Concurrency limits: the slots an execution takes, or parks waiting for (None: none).
    gate: SlotGate | None = None
    # Dependencies' circuits: an open one parks what depends on it (None: no breaking).
    circuits: CircuitWatch | None = None
    # Rate limits: the buckets model calls take from (None: rate limits are not kept).
    rates: Rates | None = None
    # After a commit, run the step's successor here rather than publish it (see
    # cairn.workers.step.continuation): a broker round trip saved, and the next step's
    # read — in memory too, on the embedded runtime's threads.
    continues: bool = False
    # How long a message's group of branches (cairn.engine.grouping) runs before the
    # siblings it has not begun are published on their own (cairn.workers.step.siblings).
    spill_after: float = 0.05
    # This process's build (docs/versions.md), recorded in the events of the nodes it
    # runs; None: CAIRN_BUILD (a Celery worker's parent sets it to the derived one).
    build: str | None = None
    heartbeats: Heartbeats = field(init=False)
    setup: StepSetup = field(init=False)

    def __post_init__(self) -> None:
        self.build = self.build or self.settings.build
        self.heartbeats = Heartbeats(self.leases)
        # Each part an attribute of its own, as the stages reach for it on every step.
        parts = self.parts
        door = parts.executions
        self.executions: ExecutionDoor = door
        self.steps: StepCommits = parts.steps
        self.reads: RunReads = parts.reads
        self.pauses: PausedQueues = parts.pauses
        self.outbox: OutboxPart = parts.outbox
        self.recovery: RecoveryPolicy = parts.recovery
        self.code = CodeFaults(door.code_faults, self.worker)
        self.setup = StepSetup(
            door,
            self.leases,
            self.settings,
            self.heartbeats,
            self.gate,
            self.circuits,
            self.rates,
        )

    def run(
        self,
        body: Any,
        continued: list[str] | None = None,
        hand_over: HandOver | None = None,
        siblings: object = None,
    ) -> Handled | Failed:
        """How the message's own step ended; ``continued`` gets how each step this
        worker continued with after it ended (``node#iteration outcome``) — the siblings
        the message carried (their header, ``siblings``) among them."""
        try:
            message = with_siblings(NodeMessage.from_dict(body), siblings)
            with node_scope(message):
                try:
                    return self.step(message, continued, hand_over)
                except Exception as error:  # cairn's own failure: tagged, then as before
                    rejected = isinstance(error, InvalidMessage | UnknownNode | CodeMissing)
                    if not rejected and not is_outage(error):
                        report_failure(error, ErrorClass.PERMANENT)
                    raise
        except (InvalidMessage, UnknownNode) as exc:
            log.error("rejected node message %s: %s", _short(body), exc)
            return Handled.REJECTED
        except CodeMissing as missing:
            self.code.missing(missing)
            return Handled.CODE_UNAVAILABLE

    def step(
        self,
        message: NodeMessage,
        continued: list[str] | None = None,
        hand_over: HandOver | None = None,
    ) -> Handled | Failed:
        """The message's step; then each step this worker continues with, and each
        sibling the message carried, as its own."""
        continuation = Continuation()
        siblings = self._siblings(message)
        try:
            handled, following = self.stages(
                message, continuation, hand_over=hand_over, siblings=siblings
            )
            while (following := self._next(following, siblings, continuation)) is not None:
                following = self._continue(following, continuation, siblings)
        finally:  # a lease handed on to a step an error kept from running: let it go
            self._let_go(continuation.take_lease())
            if siblings is not None:  # those it will not run go on their own
                if (queued := continuation.take_queued()) is not None:
                    siblings.alone(queued)
                siblings.spill()
                self._count(siblings)
        if continued is not None:
            continued.extend(continuation.steps)
        return handled

    def _next(
        self, kept: NodeMessage | None, siblings: Siblings | None, continuation: Continuation
    ) -> NodeMessage | None:
        """What this worker runs next: the step it kept from its last commit, else the next
        sibling (taken already if the step before handed its lease on to it)."""
        if kept is not None:
            return kept
        if (queued := continuation.take_queued()) is not None:
            return queued
        return None if siblings is None else self._sibling(siblings, continuation)

    def _sibling(
        self, siblings: Siblings, continuation: Continuation, running: int = 0
    ) -> NodeMessage | None:
        """The next sibling to run here — while the chain is within its bounds (``running``:
        a step begun and not yet counted) and their queue is not paused (those left are
        spilled: held in the outbox, with their rows, until it resumes)."""
        if not continuation.open(running) or self.pauses.holds(siblings.lead):
            return None
        definition = continuation.definition
        while (sibling := siblings.take()) is not None:
            node = None if definition is None else definition.nodes.get(sibling.node)
            if not (isinstance(node, TaskNode) and awaited(node, importing=True)):
                return sibling
            # Awaited on the loop holding no pool slot: a message of its own, not run here.
            siblings.alone(sibling)
        return None

    def _count(self, siblings: Siblings) -> None:
        """What became of a message's siblings, into the fleet's counters (one round trip
        a message that carried any)."""
        try:
            self.leases.add(siblings.counts())
        except Exception:  # counters are best effort
            log.warning("counting the siblings of %s failed", siblings.lead.key, exc_info=True)

    def _siblings(self, message: NodeMessage) -> Siblings | None:
        """The siblings ``message`` carries, to be spilled if its group runs too long."""
        if not message.siblings:
            return None
        siblings = Siblings(message, partial(self.outbox.publish, group=False))
        SpillTimer.of_process().arm(siblings, self.spill_after)
        return siblings

    def _continue(
        self, this: NodeMessage, continuation: Continuation, siblings: Siblings | None
    ) -> NodeMessage | None:
        """A step this worker continues with; the one it continues with next, if any."""
        outcome: Handled | Failed | str
        try:  # it waited in no queue: its lease wait runs from its predecessor's commit
            # What it reports (Sentry, log lines) is tagged with its own node, not with
            # the step of the message the chain began with.
            with delivered(clock.wall()), node_scope(this):
                outcome, following = self.stages(
                    this, continuation, continuing=True, siblings=siblings
                )
        except Exception:  # its row is unsent: the relay publishes it, as after a crash
            log.warning("the step continued with, %s, failed", this.key, exc_info=True)
            outcome, following = "error", None
        continuation.steps.append(f"{this.node}#{this.iteration} {_named(outcome)}")
        return following

    def stages(
        self,
        message: NodeMessage,
        continuation: Continuation,
        *,
        continuing: bool = False,
        hand_over: HandOver | None = None,
        siblings: Siblings | None = None,
    ) -> tuple[Handled | Failed, NodeMessage | None]:
        """read → admit → hold → execute → commit → release; and the message this worker
        continues with (kept from the commit, unpublished), if any. A sibling to run next
        (of ``siblings``) is taken as the step lets its lease go, to hand the lease on."""
        # continuing: its lease handed on by the release of the step before
        handed = continuation.take_lease() if continuing else None
        try:
            found = read(self, message)
        except BaseException:
            self._let_go(handed)
            raise
        if isinstance(found, Handled | Unstarted):
            self._let_go(handed)
        if isinstance(found, Handled):
            return found, None  # ALREADY_DONE, RUN_FINISHED, PAUSED, UNCONFIRMED
        if isinstance(found, Unstarted):
            return cancel_unstarted(self, found), None  # lease, commit, release
        continuation.definition = found.definition
        admitted = admit(self, found, handed)  # lease, heartbeat, circuits, an irreversible's slots
        if isinstance(admitted, Handled):
            return self._parked(message, admitted), None  # LEASE_HELD, PARKED: holds nothing
        try:
            held = hold(self, admitted)  # claim, takeover, slots
        except BaseException:
            let_go(self, admitted.lease, admitted.beat)
            raise
        if isinstance(held, Handled):
            let_go(self, admitted.lease, admitted.beat)
            return self._parked(message, held), None  # UNCONFIRMED, ALREADY_DONE, GAVE_UP, PARKED
        if hand_over is not None and self._handed_over(held, hand_over):
            return Handled.AWAITING, None  # awaited on the loop, concluded there
        ran: Ran | None = None
        completion: Completion | Handled | None = None
        keep = (
            partial(next_to_run, self, continuation, held.message, found.definition)
            if self.continues
            else None
        )
        then = None
        if siblings is not None:  # the next of them taken as the lease is let go
            then = partial(self._queue, siblings, continuation, continuing)
        try:
            ran = execute(self, held)  # the handler, or the cache; fused successors too
            # the lease confirmed, then one transaction (marking its own row sent when
            # continued with: the row is unsent until then, the relay's if this dies)
            completion = commit(self, held, ran, keep=keep, continuing=continuing)
        finally:
            # heartbeat, lease (or handed on to the kept message's or next sibling's), slots
            continuation.handed = release(self, held, ran, completion, then=then)
        handled = settle(self, held, ran, completion)  # COMMITTED, DISCARDED, LEASE_LOST
        return handled, completion.kept if isinstance(completion, Completion) else None

    def _queue(
        self, siblings: Siblings, continuation: Continuation, continuing: bool
    ) -> NodeMessage | None:
        """The sibling to run next, taken as the step before it lets its lease go."""
        continuation.queued = self._sibling(siblings, continuation, running=int(continuing))
        return continuation.queued

    def _handed_over(self, held: Held, hand_over: HandOver) -> bool:
        """An async node made ready and handed over to be awaited (True), or not one to
        await: it runs here."""
        try:
            ready = awaitable(self, held)
            if ready is None:
                return False
            hand_over(ready)  # the last thing it does, or it raises having taken nothing
        except BaseException:
            release(self, held, None, None)
            raise
        return True

    def _acquire(self, message: NodeMessage, fence_floor: int) -> Lease | None:
        return self._through_outages(
            f"claiming {message.key}",
            lambda: self.leases.acquire(
                message.lease_key,
                self.settings.lease_ttl,
                self.lease_record(message),
                floor=fence_floor,
                attempt=message.attempt,
            ),
        )

    def lease_record(self, message: NodeMessage) -> dict[str, Any]:
        """The heartbeat record a claim of ``message``'s execution starts with."""
        return {
            "worker": self.worker,
            "attempt": message.attempt,
            "workflow": message.workflow,
            "version": message.version,
        }

    def _let_go(self, handed: Handing | None) -> None:
        """A lease handed on to a step that will not run here after all."""
        if handed is not None and (lease := taken(handed)) is not None:
            self._give_up_lease(lease)

    def _give_up_lease(self, lease: Lease) -> None:
        """A handler outlived its timeout and grace period: let its lease go, so the next
        attempt (or recovery) need not wait out the TTL and no death is counted for it."""
        try:
            self.leases.release(lease)
        except Exception:  # it expires on its own
            log.warning("releasing %s failed", lease.key, exc_info=True)

    def _parked(self, message: NodeMessage, handled: Handled) -> Handled:
        """``handled``; a parked execution, its lease let go, is woken again at once if
        it was woken or stopped meanwhile (:meth:`cairn.engine.slots.SlotGate.parked`)."""
        gate = self.gate
        if handled is Handled.PARKED and gate is not None:
            self._through_outages(
                f"looking again at {message.key}'s wait", lambda: gate.parked(message.key)
            )
        return handled

    def _through_outages(self, what: str, call: Callable[[], _T]) -> _T:
        return through_outages(self.settings.reconnect_within, what, call)


def with_siblings(message: NodeMessage, header: object) -> NodeMessage:
    """``message`` with the siblings its header names. A malformed header is logged and
    left: the message runs alone, and the siblings' unsent rows are relayed."""
    try:
        carried = siblings_from_header(header)
    except InvalidMessage as bad:
        log.error("ignored the siblings of %s: %s", message.key, bad)
        return message
    return replace(message, siblings=carried) if carried else message


def _named(outcome: Handled | Failed | str) -> str:
    if isinstance(outcome, Failed):
        return "failed"
    return str(outcome)


def _short(body: Any) -> str:
    text = repr(body)
    return text if len(text) < 300 else text[:300] + "..."
