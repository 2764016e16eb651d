"""Advancing a run by one event, in one transaction: lock the run row, restore its state
(the cached state, or the latest snapshot plus later events), apply the event through the
decider, append the event, carry out the commands that are rows (node executions, outbox
messages, timers, holds, child runs, inbox entries for other runs), write a snapshot if
one is due, update the run row, commit. Only then are the outbox messages published and
the after-commit hooks told.

A worker's result goes through :meth:`Steps.complete`, which records it in the
idempotency table *in the same transaction* as the advance it causes, so a trivial step
costs one commit — one statement, when the run has not moved since the worker read it
and the decision only dispatches (the store's ``complete_step``), and one commit for
siblings finishing together in this process (:mod:`cairn.engine.optimistic`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cairn.decider import Decision
from cairn.decider.children import child_run_id
from cairn.engine.heads import RunHeads
from cairn.engine.hooks import AfterCommit, log_finish, tell
from cairn.engine.inputs import check_input, child_link, child_refused, new_run
from cairn.engine.optimistic import Completion, Keep, OneStatement, Pending
from cairn.engine.outbox import Outbox, with_outbox_ids
from cairn.engine.plan import Plan, Planner, result_values
from cairn.engine.reads import AUDIT_ONLY, Reads, Restored, restore
from cairn.engine.registry import Registry
from cairn.errors import CairnError, InvalidInput, RunNotFound, UnknownWorkflow
from cairn.faults import fault_point
from cairn.model.commands import (
    CancelNode,
    DetachNode,
    HoldExecution,
    NotifyParent,
    SettleExecution,
    StartChild,
)
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import (
    CancelRequested,
    Event,
    Phase,
    RunStarted,
    event_from_dict,
    event_to_dict,
    stamped,
)
from cairn.model.keys import ExecutionKey
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome, RunWrite, StepWrites
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus, stopped_execution
from cairn.store.records import RunRecord, from_epoch, utcnow
from cairn.store.sql import Store, Tx

log = logging.getLogger(__name__)

# The fence of a result that comes from no claim (the scheduler's verdicts): no claim
# outranks it.
ANY_FENCE = 2**31 - 1


@dataclass
class Advanced:
    """A step written, not yet committed: its decision, the messages to publish once it
    commits, and the inbox entries (id, run) it posted for other runs."""

    decision: Decision
    messages: list[NodeMessage]
    posted: list[tuple[int, str]] = field(default_factory=list)


class _Discard(Exception):  # control flow: rolls the transaction back
    def __init__(self, decision: Decision) -> None:
        self.decision = decision


class Steps:
    """The write path of a step, on every road into it: an event from outside, a
    worker's result, an inbox entry."""

    def __init__(
        self, planner: Planner, outbox: Outbox, reads: Reads, hooks: list[AfterCommit]
    ) -> None:
        self.store: Store = reads.store
        self.registry: Registry = reads.registry
        self.planner = planner
        self.outbox = outbox
        self.reads = reads
        self.hooks = hooks
        self.heads: RunHeads[Pending] = RunHeads()
        # Whether a run submitted here leaves a head its first nodes begin from: only in
        # a process that runs nodes (a worker, the embedded runtime), else it is memory
        # held for nothing (an API server's every submission).
        self.starts_leave_heads = False
        self.optimistic = OneStatement(
            self.store, self.registry, planner, outbox, heads=self.heads, told=self.committed_plan
        )

    # -- an event ----------------------------------------------------------------------

    def apply(
        self,
        run_id: str,
        make_event: Callable[[float], Event],
        *,
        before: Callable[[Tx], bool] | None = None,
        skip_locked: bool = False,
    ) -> Decision | None:
        """Advance ``run_id`` by the event ``make_event(now)``, in one transaction.

        ``before`` runs first in the same transaction (e.g. claiming a timer); if it
        returns False, nothing is done. ``skip_locked``: if another transaction is
        advancing the run, do nothing rather than wait (a scheduler moves on to the next
        timer; it will find this one again if it is still due).
        """
        with self.store.transaction() as tx:
            row, now = tx.lock_run(run_id, skip_locked=skip_locked)
            if row is None:
                if skip_locked:
                    return None
                raise RunNotFound(f"no run {run_id}")
            if before is not None and not before(tx):
                return None
            definition = self.registry.get(row.workflow_ref, row.version, tx)
            state = restore(tx, row, definition)
            advanced = self.advance(tx, row, definition, state, make_event(now))
        self.after_commit(advanced)
        return advanced.decision

    def deliver(self, entry: int, run_id: str) -> bool:
        """Apply an inbox entry to its run (and take it), in one transaction; False if
        another process took it first. A run that refuses the event (a cancel for a
        child that has ended meanwhile) or no longer exists gets the entry removed."""
        taken: dict[str, Any] = {}

        def take(tx: Tx) -> bool:
            event = tx.take_posted(entry)
            taken["event"] = event
            return event is not None

        try:
            decision = self.apply(
                run_id, lambda now: stamped(event_from_dict(taken["event"]), now), before=take
            )
        except CairnError as refused:
            with self.store.transaction() as tx:
                event = tx.take_posted(entry)
            if event is not None:
                log.info("run %s refused %s: %s", run_id, event.get("type"), refused)
            return event is not None
        return decision is not None

    # -- a worker's result -------------------------------------------------------------

    def complete(
        self,
        message: NodeMessage,
        outcome: NodeOutcome,
        worker: str,
        known: Restored | None = None,
        fence: int = ANY_FENCE,
        *,
        keep: Keep | None = None,
    ) -> Completion:
        """Record a worker's result and advance the run with it, in one transaction.

        The first result for an execution wins; a second (a duplicate delivery, a stale
        worker) is discarded and changes nothing, and so is a result whose claim
        (``fence``) another worker has taken over since. ``known`` is the run as the
        worker read it before running: if the run has not moved since, the whole
        completion is one statement where the backend has one — planned on the step a
        sibling branch committed here since, if one did, written with the siblings
        finishing with it here, and on the run as it is now if another process moved it
        (a few times); otherwise the run is locked and read again. ``keep``: what the
        worker runs next itself, unpublished.
        """
        if known is not None:
            completion = self.optimistic.complete(message, outcome, worker, known, fence, keep=keep)
            if completion is not None:
                return completion
        key = message.key
        try:
            with self.store.transaction() as tx:
                row, now = tx.finish_and_lock(
                    key, message.attempt, fence, result_values(outcome, worker)
                )
                if row is None:
                    return Completion(
                        False, f"a result for {key} attempt {message.attempt} is already recorded"
                    )
                definition = self.registry.get(row.workflow_ref, row.version, tx)
                if known is not None and known.row.last_seq == row.last_seq:
                    state = known.state
                else:
                    state = restore(tx, row, definition)
                event = replace(outcome.event, at=now)
                advanced = self.advance(tx, row, definition, state, event)
                if advanced.decision.ignored:
                    raise _Discard(advanced.decision)
        except _Discard as discard:  # the run has moved on: keep nothing of this result
            return Completion(False, discard.decision.ignored or "", discard.decision)
        kept = self.after_commit(advanced, keep)
        return Completion(True, decision=advanced.decision, kept=kept)

    def complete_fused(
        self, steps: Sequence[tuple[NodeMessage, NodeOutcome]], worker: str, fence: int
    ) -> Completion:
        """Record an ephemeral node's result and the results of the nodes its worker ran
        on after it, in one transaction (see :mod:`cairn.decider.fusion`): each
        step's advance dispatches the next, whose execution row is then finished at
        once and whose message is never published. If the run went elsewhere meanwhile
        (the decision now dispatches something else), the results from there on are
        not recorded: those nodes run again when dispatched, like any lost result."""
        (first, first_outcome), rest = steps[0], steps[1:]
        try:
            with self.store.transaction() as tx:
                row, now = tx.finish_and_lock(
                    first.key, first.attempt, fence, result_values(first_outcome, worker)
                )
                if row is None:
                    return Completion(
                        False, f"a result for {first.key} attempt {first.attempt} is recorded"
                    )
                definition = self.registry.get(row.workflow_ref, row.version, tx)
                state = restore(tx, row, definition)
                advanced = self.advance(
                    tx, row, definition, state, replace(first_outcome.event, at=now), last=False
                )
                if advanced.decision.ignored:
                    raise _Discard(advanced.decision)
                sent: list[NodeMessage] = []
                for message, outcome in rest:
                    ran = [
                        m
                        for m in advanced.messages
                        if (m.key, m.attempt) == (message.key, message.attempt)
                    ]
                    if not ran:
                        break
                    tx.mark_sent([m.outbox_id for m in ran if m.outbox_id is not None])
                    sent.extend(m for m in advanced.messages if m not in ran)
                    row, now = tx.finish_and_lock(
                        message.key, message.attempt, fence, result_values(outcome, worker)
                    )
                    assert row is not None  # its execution row was inserted just now
                    state = advanced.decision.state
                    posted = advanced.posted
                    advanced = self.advance(
                        tx, row, definition, state, replace(outcome.event, at=now), last=False
                    )
                    advanced.posted[:0] = posted
                advanced.messages[:0] = sent
        except _Discard as discard:
            return Completion(False, discard.decision.ignored or "", discard.decision)
        self.after_commit(advanced)
        return Completion(True, decision=advanced.decision)

    # -- history -----------------------------------------------------------------------

    def record(self, run_id: str, kind: str, data: Mapping[str, Any]) -> int | None:
        """Append an audit event (``audit.<kind>``): history for people, never input to
        the decider. Returns its seq; None if there is no such run."""
        with self.store.transaction() as tx:
            row, now = tx.lock_run(run_id)
            if row is None:
                return None
            seq = row.last_seq + 1
            cached = row.state  # the state does not change: the cache stays true
            run = RunWrite(
                status=row.status,
                last_seq=seq,
                updated_at=from_epoch(now),
                current=list(row.current),
                reason=row.reason,
                state_json=json.dumps(cached, separators=(",", ":")) if cached else None,
            )
            event = {"type": f"{AUDIT_ONLY}.{kind}", "at": now, **data}
            tx.write_step(
                run_id,
                StepWrites(run, event, outcome={}, sent=self.outbox.sent.drain(), dispatches=[]),
            )
        return int(seq)

    def record_recovery(self, message: NodeMessage, *, cause: str, recoveries: int) -> None:
        """A recovery in the run's history (``audit.recovered``): what runs again and why,
        from which checkpoint, and which nodes it skips because they are done."""
        run, _definition, state = self.reads.load(message.run_id)
        done = sorted(
            f"{n.node}#{n.iteration}"
            for n in state.nodes.values()
            if n.status is NodeStatus.SUCCEEDED
        )
        self.record(
            message.run_id,
            "recovered",
            {
                "node": message.node,
                "iteration": message.iteration,
                "attempt": message.attempt,
                "phase": message.phase.value,
                "cause": cause,
                "recoveries": recoveries,
                "from_seq": run.last_seq,
                "snapshot_seq": run.snapshot_seq,
                "skipped_done": done,
            },
        )

    # -- the step ----------------------------------------------------------------------

    def advance(
        self,
        tx: Tx,
        row: RunRecord,
        definition: WorkflowDefinition,
        state: RunState,
        event: Event,
        *,
        last: bool = True,
    ) -> Advanced:
        """Decide and write one step. ``last``: it is the transaction's last write, which
        commits it; otherwise the caller's transaction goes on (and commits later)."""
        decision, plan = self.planner.plan(
            row, definition, state, event, cached=row.state is not None
        )
        if plan is None:
            return Advanced(decision, [])
        advanced = Advanced(plan.decision, [])
        self._carry_out(tx, row, plan, advanced)
        log_finish(row.id, plan.decision)
        writes = self.planner.writes(plan, event, self.outbox.sent.drain())
        outbox_ids = tx.write_step(row.id, writes, last=last)
        advanced.messages[:0] = [
            replace(m, outbox_id=i) for m, i in zip(plan.dispatches, outbox_ids, strict=True)
        ]
        return advanced

    def after_commit(self, advanced: Advanced, keep: Keep | None = None) -> NodeMessage | None:
        """Once a step's transaction commits: tell the hooks, publish its messages (but
        the one ``keep`` takes, returned), deliver the inbox entries it posted (the
        scheduler delivers any left behind)."""
        run_id = advanced.decision.state.run_id
        self.heads.forget(run_id)  # a step not through the heads: the kept one is older
        tell(self.hooks, run_id, advanced.decision)
        kept = self._publish(advanced.messages, keep)
        if advanced.posted:
            fault_point("inbox.after_commit")
        for entry, run_id in advanced.posted:
            try:
                self.deliver(entry, run_id)
            except Exception:  # committed already: the scheduler will deliver it
                log.warning(
                    "delivering inbox entry %d to run %s failed", entry, run_id, exc_info=True
                )
        return kept

    def committed_plan(
        self,
        run_id: str,
        plan: Plan,
        outbox_ids: Mapping[tuple[str, int, str], int],
        keep: Keep | None = None,
    ) -> NodeMessage | None:
        """Once a plan the store wrote in one statement has committed (it writes no other
        rows, so posts nothing)."""
        log_finish(run_id, plan.decision)
        tell(self.hooks, run_id, plan.decision)
        return self._publish(with_outbox_ids(plan.dispatches, outbox_ids), keep)

    def _publish(self, messages: list[NodeMessage], keep: Keep | None) -> NodeMessage | None:
        kept = keep(messages) if keep is not None and messages else None
        self.outbox.publish([m for m in messages if m is not kept])
        return kept

    def _carry_out(self, tx: Tx, row: RunRecord, plan: Plan, advanced: Advanced) -> None:
        """The rows a decision changes besides the step's own: cancellations, held
        executions (held, or settled by an operator), child runs started, events for
        other runs, and webhook notices (the child runs' messages and the inbox entries
        are added to ``advanced``, to be sent once committed)."""
        new = plan.decision.state
        for command in plan.row_commands:
            if isinstance(command, CancelNode | DetachNode):
                # The run no longer waits for this execution: a late result must not count.
                node = new.nodes.get(command.node)
                if node is not None and not node.active:
                    key = ExecutionKey(row.id, command.node, command.iteration, Phase.RUN.value)
                    tx.set_execution_status(key, stopped_execution(node.status))
                if node is not None and node.child is not None and isinstance(command, CancelNode):
                    child = child_run_id(row.id, command.node, command.iteration, command.attempt)
                    stop = CancelRequested(
                        at=0.0, reason=f"its parent: {command.reason}", actor=f"run {row.id}"
                    )
                    advanced.posted.append((tx.post(child, event_to_dict(stop)), child))
            elif isinstance(command, HoldExecution):
                key = ExecutionKey(row.id, command.node, command.iteration, command.phase.value)
                tx.hold_execution(key, command.attempt)
            elif isinstance(command, SettleExecution):
                key = ExecutionKey(row.id, command.node, command.iteration, command.phase.value)
                tx.settle_execution(key, command.status.value, command.result, command.error)
            elif isinstance(command, StartChild):
                self._start_child(tx, row, command, new.updated_at, advanced)
            elif isinstance(command, NotifyParent):
                advanced.posted.append((tx.post(command.run_id, command.event), command.run_id))
        if not plan.notices:
            return
        stamp = from_epoch(new.updated_at) if new.updated_at is not None else utcnow()
        for notice in plan.notices:
            tx.add_notification(
                {
                    "event_id": notice.event_id,
                    "run_id": row.id,
                    "namespace": row.namespace,
                    "kind": notice.kind,
                    "url": row.webhook_url,
                    "body": notice.body,
                    "created_at": stamp,
                    "due_at": stamp,
                }
            )

    def _start_child(
        self, tx: Tx, parent: Any, command: StartChild, at: float | None, advanced: Advanced
    ) -> None:
        """Insert the child run and take its first step, in the parent's transaction.
        Its id derives from the parent execution: started twice is started once."""
        at = at if at is not None else utcnow().timestamp()
        resolved = self._child_definition(tx, parent, command)
        if isinstance(resolved, str):  # the parent's node fails; nothing else can be done here
            refused = child_refused(command, at, resolved)
            advanced.posted.append((tx.post(parent.id, event_to_dict(refused)), parent.id))
            return
        definition, payload = resolved
        values = new_run(
            command.run_id, parent.namespace, definition, payload, request_id=None, at=at
        )
        if not tx.insert_run(values):
            return
        log.info(
            "run %s: %s started child run %s (%s, correlation %s)",
            parent.id,
            command.node,
            command.run_id,
            definition.key,
            command.correlation_id,
        )
        started = RunStarted(
            at=at,
            input=payload,
            parent=child_link(parent.id, command),
            budget=command.budget,
            actor=f"system:run/{parent.id}",
        )
        state = RunState(command.run_id, definition.name, definition.version)
        child = self.advance(
            tx, tx.inserted_run(command.run_id), definition, state, started, last=False
        )
        advanced.messages.extend(child.messages)
        advanced.posted.extend(child.posted)

    def _child_definition(
        self, tx: Tx, parent: Any, command: StartChild
    ) -> tuple[WorkflowDefinition, dict[str, Any]] | str:
        """The child's definition and its checked input, or why the child cannot start."""
        try:
            # Named by the parent's definition: within the namespace that owns it.
            definition = self.registry.resolve_for(
                parent.workflow_namespace, command.workflow, command.version, tx
            )
            payload = check_input(
                definition, command.input, limit_bytes=self.planner.settings.max_payload_bytes
            )
        except (UnknownWorkflow, InvalidInput) as exc:
            return str(exc)
        return definition, payload
