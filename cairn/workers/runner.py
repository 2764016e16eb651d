"""Executing one node message: the worker's half of the write path.

1. Skip what is already done: the idempotency row finished, a newer attempt exists, or
   the run ended. A run being cancelled turns a queued node into a no-op.
2. Take the lease (an older attempt's is superseded), kept alive by a heartbeat while the
   handler runs. A takeover from a holder that died counts a recovery, and may not run
   at all (a poison node, an irreversible one); a claim after a lapsed one is resumed.
3. Run the handler on the restored state with a step context, held to its node's
   timeout (:mod:`cairn.workers.deadlines`).
4. Commit the result and the run's next step in one transaction, unless the lease was
   lost meanwhile (PostgreSQL would refuse it; a worker that knows it is stale does not try).
5. Release the lease (token-checked)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial
from typing import Any, TypeVar

from cairn.config import Settings
from cairn.decider.fusion import MAX_FUSED, fused_next
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.rates import Rates
from cairn.engine.reads import Restored, restore
from cairn.engine.recovery import Outcome, RecoveryPolicy
from cairn.engine.slots import Pool, SlotGate, holder_of
from cairn.errors import UnknownNode
from cairn.faults import fault_point
from cairn.lease.heartbeat import Heartbeats
from cairn.lease.port import Lease, Leases
from cairn.lease.waits import current_wait
from cairn.model.definition import (
    AnyNode,
    ErrorClass,
    TaskNode,
    WorkflowDefinition,
)
from cairn.model.events import (
    NodeCancelled,
    Phase,
)
from cairn.model.keys import Claim, ExecutionKey, lease_key
from cairn.model.messages import InvalidMessage, NodeMessage, message_namespace
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import RunState
from cairn.model.statuses import ExecutionStatus, NodeStatus, RunStatus
from cairn.observe.sentry import node_scope, report_failure
from cairn.reconnect import is_outage, through_outages
from cairn.store.records import ExecutionClaim, ExecutionHead, RunRecord
from cairn.workers.cache import MemoryResultCache, ResultCache, invalidate, keep, node_entry
from cairn.workers.circuits import CircuitWatch, Guarded
from cairn.workers.code_faults import CodeFaults, CodeMissing
from cairn.workers.context import StepContext
from cairn.workers.execute import execute, succeeded
from cairn.workers.failed import Failed, failure_of
from cairn.workers.paused import hold_for_pause
from cairn.workers.setup import Claimed, Recorders, StepSetup
from cairn.workers.stale import record_stale

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Handled(StrEnum):
    COMMITTED = "committed"
    DISCARDED = "discarded"  # ran, but the result was not the first for its key
    ALREADY_DONE = "already_done"  # finished before, or superseded: nothing ran again
    RUN_FINISHED = "run_finished"
    CANCELLED = "cancelled"
    LEASE_HELD = "lease_held"  # another worker holds the node now
    # An irreversible node some worker claimed before: it may have taken effect, so it
    # does not run again until an operator says so (the scheduler holds it).
    UNCONFIRMED = "unconfirmed"
    LEASE_LOST = "lease_lost"
    REJECTED = "rejected"  # the message itself is invalid
    # Its holder died once too often (CAIRN_MAX_RECOVERIES): failed, not run again.
    GAVE_UP = "gave_up"
    # A concurrency limit is full: it waits, parked, for a slot (no lease, no message).
    PARKED = "parked"
    PAUSED = "paused"  # its queue is paused: back in the outbox until it resumes
    CODE_UNAVAILABLE = "code_unavailable"  # this worker cannot import the handlers: it waits


@dataclass
class NodeRunner:
    orchestrator: Orchestrator
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
    heartbeats: Heartbeats = field(init=False)
    recovery: RecoveryPolicy = field(init=False)
    setup: StepSetup = field(init=False)

    def __post_init__(self) -> None:
        self.heartbeats = Heartbeats(self.leases)
        self.recovery = RecoveryPolicy(self.orchestrator, self.settings)
        self.code = CodeFaults(self.orchestrator.store, self.worker)
        self.setup = StepSetup(
            self.orchestrator,
            self.leases,
            self.settings,
            self.heartbeats,
            self.gate,
            self.circuits,
            self.rates,
        )

    def run(self, body: Any) -> Handled | Failed:
        try:
            message = NodeMessage.from_dict(body)
            with node_scope(message):
                try:
                    return self._run(message)
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

    def _run(self, message: NodeMessage) -> Handled | Failed:
        orchestrator = self.orchestrator
        key = message.key
        read = self._through_outages(f"reading {key}", lambda: self._read(message))
        if isinstance(read, Handled):
            return read
        execution, run, definition, state = read
        self.code.settle()
        # What the messages it leads to are published with (a fused chain's next node).
        message = replace(
            message, priority=run.priority, namespace=message_namespace(run.namespace)
        )
        if orchestrator.pause_book.holds(message):  # back to the outbox until it resumes
            self._through_outages(f"holding {key}", lambda: hold_for_pause(orchestrator, message))
            return Handled.PAUSED
        db_time = execution.db_now
        if state is None and message.phase is Phase.RUN:
            return self._cancel_unstarted(message, execution.fence)
        node = definition.nodes.get(message.node)
        if node is None:
            raise UnknownNode(f"{definition.key} has no node {message.node!r}")
        irreversible = isinstance(node, TaskNode) and node.irreversible
        if irreversible and execution.status != ExecutionStatus.SCHEDULED:
            return Handled.UNCONFIRMED  # a redelivery after its worker was lost
        ref = (
            node.compensate
            if message.phase is Phase.COMPENSATE
            else (node.handler if isinstance(node, TaskNode) else None)
        )
        if ref is None:
            raise InvalidMessage(
                f"{definition.key} node {message.node!r} has nothing to run "
                f"in phase {message.phase.value}"
            )
        if state is None:  # a compensation while cancelling: it needs the state too
            run, _definition, state = orchestrator.load(message.run_id)
            db_time = None
        if db_time is None:  # every event's time comes from the database's clock
            db_time = self._through_outages("reading the clock", self._db_now)
        known = Restored(run, state, db_time)

        lease = self._acquire(message, execution.fence)
        if lease is None:
            return Handled.LEASE_HELD
        if lease.superseded:
            log.info("%s attempt %d supersedes an older attempt's lease", key, message.attempt)
        pools, guarded = self.setup.admission(definition, node, message, run, state)
        holder = holder_of(lease.key, lease.token)
        # An irreversible node's first claim is its last: it waits for its slot before.
        if irreversible and not self._enter(message, pools, holder, run.namespace, lease):
            return Handled.PARKED
        recoveries = execution.recoveries
        if lease.fence > 1 or irreversible:
            claim = self._claim(key, message.attempt, lease.fence, first=irreversible)
            if claim is None:
                self.leases.release(lease)
                # Finished meanwhile, or a newer claim took it; or, irreversible, claimed before.
                return Handled.UNCONFIRMED if irreversible else Handled.ALREADY_DONE
            # Newer than the read: a sweep may have counted a recovery since, and settled it
            # in Redis before this lease was taken (then the lease cannot tell).
            recoveries = claim.recoveries
        if lease.took_over:
            try:
                settled = self._take_over(message, node)
            except BaseException:
                self.leases.release(lease)
                raise
            if settled is not None:
                self.leases.release(lease)
                return settled
        if not message.resumed and (lease.lapsed or recoveries):
            # Interrupted work, run again — whichever copy of its message got here first,
            # and whether or not the sweep has counted the recovery yet: the handler sees
            # ctx.resumed, and the workflow's on_resume check applies.
            message = replace(message, resumed=True)
        if not irreversible and not self._enter(message, pools, holder, run.namespace, lease):
            return Handled.PARKED
        beat = self.heartbeats.hold(
            lease,
            self.settings.heartbeat_interval,
            # Compensations are never cancelled: they are how a cancel undoes work.
            cancel_requested=partial(orchestrator.stop_requested, key, message.attempt)
            if message.phase is Phase.RUN
            else None,
        )
        completion = None
        timings: dict[str, float] = {}  # the step's parts, for the fleet's histograms
        claimed = Claimed(run, definition, known, lease.fence, beat)
        chain = _Chain(holder, Claim(key, message.attempt, lease.fence), message.resumed)
        recorders = self._equip(claimed, message, state, chain)
        try:
            # Only a re-execution can find a checkpoint: a first attempt spends no read on it.
            ctx = self.setup.context(
                claimed,
                message,
                state,
                queued_s=current_wait(),
                recorders=recorders,
                restore=message.resumed or message.attempt > 1,
            )
            outcome = self._outcome(claimed, message, state, ctx, ref.resolve())
            if self.circuits is not None and guarded is not None:
                self.circuits.report(message, guarded, outcome)
            if outcome.duration_s is not None:
                timings["execution"] = outcome.duration_s
            fault_point("handler.after_return")
            if not self.heartbeats.confirm(beat):
                record_stale(self, message, lease.fence, caught_by="lease")
                return Handled.LEASE_LOST
            steps = [(message, outcome), *self._run_on(claimed, message, outcome, chain)]
            committing = time.perf_counter()
            # The result exists only here: ride out a database restart rather than lose it.
            completion = self._through_outages(
                f"committing {key}",
                lambda: (
                    orchestrator.complete(
                        message, outcome, self.worker, known=known, fence=lease.fence
                    )
                    if len(steps) == 1
                    else orchestrator.complete_fused(steps, self.worker, fence=lease.fence)
                ),
            )
            timings["commit"] = time.perf_counter() - committing
            fault_point("complete.after_commit")
        finally:
            self.heartbeats.drop(beat)
            try:
                self.leases.release(
                    lease,
                    finished=completion is not None and completion.recorded,
                    timings=timings,
                )
            except Exception:  # the lease expires on its own
                log.warning("releasing %s failed", lease.key, exc_info=True)
            self._leave([*pools, *chain.pools], holder)
        if completion.recorded:
            invalidate(self.cache, run.namespace, definition, state.vars, steps)
            for kept in chain.recorders:
                kept.checkpoints.forget()  # their results are committed
        if not completion.recorded:
            if orchestrator.fenced_out(key, lease.fence):
                record_stale(self, message, lease.fence, caught_by="fence")
                return Handled.LEASE_LOST
            log.info("result of %s discarded: %s", key, completion.reason)
            return Handled.DISCARDED
        return failure_of(steps) or Handled.COMMITTED

    def _equip(
        self, claimed: Claimed, message: NodeMessage, state: RunState, chain: _Chain
    ) -> Recorders | None:
        """The execution's recorders, fenced by the chain's claim (its own, for the
        chain's first), its model calls under its rate limits; kept with the chain, to
        forget their checkpoints once the results are committed."""
        node = claimed.definition.nodes[message.node]
        own = chain.claim.key == message.key
        recorders = self.setup.recorders(
            message,
            node,
            chain.claim,
            claimed.beat,
            # A re-execution may find calls an interrupted one made; so may a node run
            # on in a chain that runs again (the chain before it may have got that far).
            may_have_record=chain.resumed or (own and message.attempt > 1),
        )
        if recorders is not None:
            recorders.calls.limiter = self.setup.limiter(
                claimed.definition, node, claimed.run, state, claimed.beat
            )
            chain.recorders.append(recorders)
        return recorders

    def _outcome(
        self,
        claimed: Claimed,
        message: NodeMessage,
        state: RunState,
        ctx: StepContext,
        handler: Any,
    ) -> NodeOutcome:
        """Run the handler — or take a cached node's result from the cache."""
        definition, namespace = claimed.definition, claimed.run.namespace
        check = definition.on_resume if message.resumed and message.phase is Phase.RUN else None
        entry = node_entry(namespace, definition, message, state.vars)
        cached = self.cache.get(entry) if entry is not None else None
        if cached is not None:
            ctx.log.info("result taken from the cache (%s)", entry)
            return succeeded(ctx, message, cached, 0.0)
        node = definition.nodes[message.node]
        records_http = isinstance(node, TaskNode) and node.record_http
        outcome = execute(
            handler,
            ctx,
            message,
            check=check,
            timeout_s=node.timeout.total_seconds() if node.timeout is not None else None,
            heartbeats=self.heartbeats,
            beat=claimed.beat,
            grace_s=self.settings.timeout_grace,
            give_up=partial(self._give_up_lease, claimed.beat.lease),
            limit_bytes=self.settings.max_payload_bytes,
            http_calls=ctx.model_calls if records_http else None,
        )
        if entry is not None and outcome.status is NodeStatus.SUCCEEDED:
            keep(self.cache, definition, message, entry, outcome.result or {})
        return outcome

    def _run_on(
        self, claimed: Claimed, message: NodeMessage, outcome: NodeOutcome, chain: _Chain
    ) -> list[tuple[NodeMessage, NodeOutcome]]:
        """After an ephemeral node: run what it leads to here and now, so that both
        results are committed together (one commit, no broker round trip) — as long as
        the decision is simply "run that task next" (see persist: ephemeral). Each node
        run on is set up as its own message would have it: admitted to its own pools and
        circuits (one full or open ends the chain before it: its message goes out with
        the commit, and waits there), its checkpoints and model calls recorded under the
        chain's claim, its calls under its rate limits, its HTTP recorded if it says so."""
        definition = claimed.definition
        steps: list[tuple[NodeMessage, NodeOutcome]] = []
        state = claimed.known.state
        while len(steps) < MAX_FUSED and claimed.beat.valid:
            following = fused_next(definition, state, message, outcome, claimed.known.now())
            if following is None or self.orchestrator.pause_book.holds(following[1]):
                break  # a paused queue's message goes out with the commit, and waits
            node = definition.nodes[following[1].node]
            assert isinstance(node, TaskNode) and node.handler is not None
            admitted, guarded = self._admit_on(claimed, following[1], node, following[0], chain)
            if not admitted:
                break
            state, message = following
            recorders = self._equip(claimed, message, state, chain)
            # Run here and now, right after the step before it: it never waited in a queue.
            ctx = self.setup.context(
                claimed, message, state, queued_s=0.0, recorders=recorders, restore=chain.resumed
            )
            outcome = self._outcome(claimed, message, state, ctx, node.handler.resolve())
            if self.circuits is not None and guarded is not None:
                self.circuits.report(message, guarded, outcome)
            steps.append((message, outcome))
        return steps

    def _admit_on(
        self,
        claimed: Claimed,
        message: NodeMessage,
        node: TaskNode,
        state: RunState,
        chain: _Chain,
    ) -> tuple[bool, Guarded | None]:
        """A node to run on in the chain: a slot of each of its pools (and of its
        circuits' that are not closed) for the chain's holder — those it holds count
        already — or False, taking none: one is full (or a circuit open)."""
        pools, guarded = self.setup.admission(claimed.definition, node, message, claimed.run, state)
        if not pools or self.gate is None:
            return True, guarded
        slots = self.gate.slots
        full = self._through_outages(
            f"taking slots for {message.key}", lambda: slots.take(pools, chain.holder)
        )
        if full is not None:
            log.info("%s not run on: its pool %s is full; it waits for a slot", message.key, full)
            return False, None
        chain.pools += pools
        return True, guarded

    def _cancel_unstarted(self, message: NodeMessage, fence_floor: int) -> Handled:
        """The run is being cancelled and this node has not started here: acknowledge
        the cancel for it — but only holding its lease, so that a duplicate message never
        speaks for a worker that is still running it (that one stops, or is detached)."""
        lease = self._acquire(message, fence_floor)
        if lease is None:
            return Handled.LEASE_HELD
        event = NodeCancelled(
            at=0.0, node=message.node, iteration=message.iteration, attempt=message.attempt
        )
        completion = None
        try:
            completion = self._through_outages(
                f"committing {message.key}",
                lambda: self.orchestrator.complete(
                    message,
                    NodeOutcome(event, NodeStatus.CANCELLED),
                    self.worker,
                    fence=lease.fence,
                ),
            )
        finally:
            self.leases.release(lease, finished=completion is not None and completion.recorded)
        return Handled.CANCELLED

    def _enter(
        self, message: NodeMessage, pools: list[Pool], holder: str, namespace: str, lease: Lease
    ) -> bool:
        """A slot of each pool, or parked (its lease released: it holds nothing)."""
        if self.gate is None or not (pools or message.woken):
            return True
        gate = self.gate
        try:
            entered = self._through_outages(
                f"taking slots for {message.key}",
                lambda: gate.enter(message, pools, holder, namespace, message.priority),
            )
        except BaseException:
            self.leases.release(lease)
            raise
        if not entered:
            self.leases.release(lease)
        return entered

    def _leave(self, pools: list[Pool], holder: str) -> None:
        if not pools or self.gate is None:
            return
        try:
            self.gate.leave(sorted(set(pools)), holder)
        except Exception:  # the slot goes with the lease; the scheduler wakes the waiters
            log.warning("giving back the slots of %s failed", holder, exc_info=True)

    def _acquire(self, message: NodeMessage, fence_floor: int) -> Lease | None:
        return self._through_outages(
            f"claiming {message.key}",
            lambda: self.leases.acquire(
                lease_key(message.run_id, message.node, message.iteration, message.phase.value),
                self.settings.lease_ttl,
                {
                    "worker": self.worker,
                    "attempt": message.attempt,
                    "workflow": message.workflow,
                    "version": message.version,
                },
                floor=fence_floor,
                attempt=message.attempt,
            ),
        )

    def _read(
        self, message: NodeMessage
    ) -> Handled | tuple[ExecutionHead, RunRecord, WorkflowDefinition, RunState | None]:
        """The execution, its run, the definition and the restored state (None while the
        run is being cancelled) — or why there is nothing to run."""
        orchestrator = self.orchestrator
        key = message.key
        # One statement; on a cache miss, immutable rows (snapshot, events up to last_seq)
        with orchestrator.store.statements() as tx:
            execution, run = tx.execution_and_run(key)
            if execution is None or run is None:
                raise InvalidMessage(f"no execution {key} was ever dispatched")
            if run.workflow_ref != message.workflow or run.version != message.version:
                raise InvalidMessage(
                    f"{key} belongs to {run.workflow_ref}@{run.version}, "
                    f"not {message.workflow}@{message.version}"
                )
            if not execution.status.active or execution.attempt != message.attempt:
                return Handled.ALREADY_DONE
            status = run.status
            if status.terminal:
                return Handled.RUN_FINISHED
            definition = self.code.load(orchestrator.registry, message, tx)
            state = None if status is RunStatus.CANCELLING else restore(tx, run, definition)
        return execution, run, definition, state

    def _give_up_lease(self, lease: Lease) -> None:
        """A handler outlived its timeout and grace period: let its lease go, so the next
        attempt (or recovery) need not wait out the TTL and no death is counted for it."""
        try:
            self.leases.release(lease)
        except Exception:  # it expires on its own
            log.warning("releasing %s failed", lease.key, exc_info=True)

    def _db_now(self) -> float:
        with self.orchestrator.store.reading() as tx:
            return tx.now()

    def _through_outages(self, what: str, call: Callable[[], _T]) -> _T:
        return through_outages(self.settings.reconnect_within, what, call)

    def _claim(
        self, key: ExecutionKey, attempt: int, fence: int, *, first: bool
    ) -> ExecutionClaim | None:
        """Record the claim in PostgreSQL before running: a takeover, so that the holder
        it replaced cannot commit; or an irreversible node's claim (``first``: none may
        have been recorded before), so that recovery knows it may have started. A
        reversible node's first claim is not recorded: that would cost every step a
        commit. None if it may not run."""

        def claim() -> ExecutionClaim | None:
            with self.orchestrator.store.statements(writes=True) as tx:
                return tx.claim_execution(key, attempt, fence, first=first)

        return self._through_outages(f"recording the claim of {key}", claim)

    def _take_over(self, message: NodeMessage, node: AnyNode) -> Handled | None:
        """Its previous holder died holding the lease (it left its heartbeat record) and
        this claim, not the scheduler's sweep, found it: the same recovery, counted
        against CAIRN_MAX_RECOVERIES and in the run's history, and under the same rule —
        a node that has killed its worker too often fails (or is held) instead of
        running again. None: run it."""

        def count() -> int | None:
            with self.orchestrator.store.transaction() as tx:
                return tx.touch_execution(message.key, message.attempt, died=True)

        recoveries = self._through_outages(f"counting the recovery of {message.key}", count)
        if recoveries is None:
            return Handled.ALREADY_DONE  # it finished meanwhile
        outcome = self.recovery.settle(
            message,
            node,
            claimed=True,
            died=True,
            recoveries=recoveries,
            worker=self.worker,
        )
        if outcome is Outcome.HELD:
            return Handled.UNCONFIRMED
        if outcome is Outcome.FAILED:
            return Handled.GAVE_UP
        try:
            self.orchestrator.record_recovery(
                message,
                cause="worker lost; taken over by a redelivered message",
                recoveries=recoveries,
            )
        except Exception:  # the history entry is best effort; the count is what binds
            log.warning("could not record the takeover of %s", message.key, exc_info=True)
        return None


@dataclass
class _Chain:
    """What a message's execution and the nodes it runs on after an ephemeral one share:
    the holder of their slots, the claim their records are fenced by (the first's), and
    whether that one runs again (a chain cut short may have run some of them before);
    the pools they took and their recorders, to give back and forget at the end."""

    holder: str
    claim: Claim
    resumed: bool
    pools: list[Pool] = field(default_factory=list)
    recorders: list[Recorders] = field(default_factory=list)


def _short(body: Any) -> str:
    text = repr(body)
    return text if len(text) < 300 else text[:300] + "..."
