"""The orchestrator's write path: submit a run, and advance it by one event.

Advancing is one transaction: lock the run row, restore its state (latest snapshot +
later events), apply the event through the decider, append the event, carry out the
commands that are rows (node executions, outbox messages, timers), write a snapshot if
one is due, update the run row, commit. Only then are the outbox messages published
(the fast path); the scheduler's relay publishes what a crash left behind. Persist
first, then publish — never the other way round.

A worker's result goes through :meth:`Orchestrator.complete`, which records it in the
idempotency table *in the same transaction* as the advance it causes, so a trivial step
costs one commit.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from jsonschema import Draft202012Validator

from cairn.config import Settings
from cairn.decider.children import child_run_id
from cairn.decider.graph import Decision, decide
from cairn.definitions.loader import load_definition
from cairn.errors import (
    CairnError,
    ConfirmationRequired,
    InvalidInput,
    RunNotFound,
    StoreError,
    UnknownWorkflow,
)
from cairn.faults import fault_point
from cairn.model.commands import (
    ArmTimer,
    CancelNode,
    Command,
    DetachNode,
    DisarmTimer,
    Dispatch,
    FinishRun,
    HoldExecution,
    NotifyParent,
    SettleExecution,
    StartChild,
)
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import (
    CancelRequested,
    ChildFinished,
    Event,
    Phase,
    RollbackRequested,
    RunForked,
    RunStarted,
    SignalReceived,
    event_from_dict,
    event_to_dict,
    stamped,
)
from cairn.model.keys import ExecutionKey
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome, StepWrites
from cairn.model.payloads import storable_json
from cairn.model.state import STATE_FORMAT, RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.orchestrator.awaiting import Awaiting, awaiting
from cairn.orchestrator.batches import MAX_BATCH, SubmitItem, Submitted
from cairn.store.records import encode_snapshot, from_epoch, utcnow
from cairn.store.sql import Store, Tx
from cairn.webhooks.notices import Notice, check_url, notices
from cairn.webhooks.signing import WebhookSecrets

log = logging.getLogger(__name__)

AUDIT_ONLY = "audit"  # events with this "type" prefix are history, not decider input
# The fence of a result that comes from no claim (the scheduler's verdicts): no claim
# outranks it.
ANY_FENCE = 2**31 - 1
# Commands that change rows besides the step's own (the fast path takes none of them;
# the run's timers are the step's own: see StepWrites).
ROW_COMMANDS = (
    CancelNode,
    DetachNode,
    HoldExecution,
    SettleExecution,
    StartChild,
    NotifyParent,
)


# Told of each decision once it is committed: (run id, decision).
AfterCommit = Callable[[str, Decision], object]


class Publisher(Protocol):
    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        """Hand messages to the broker; False if they were not taken (left to the relay)."""
        ...

    def backlog(self) -> int | None:
        """Node messages waiting in the queue for a worker; None if the broker cannot
        say (recovery then assumes none)."""
        ...


class Registry:
    """Definitions by (name, version). Registering writes the store; lookups are cached."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple[str, int], WorkflowDefinition] = {}
        self._lock = threading.Lock()

    def register(self, definition: WorkflowDefinition) -> bool:
        with self.store.transaction() as tx:
            created = tx.register_workflow(
                definition.name, definition.version, definition.spec, definition.format
            )
        if created:  # else the stored version (and the format it holds) is the truth
            with self._lock:
                self._cache[(definition.name, definition.version)] = definition
        return created

    def get(
        self, name: str, version: int | None = None, tx: Tx | None = None
    ) -> WorkflowDefinition:
        """The definition; pass ``tx`` when inside a transaction, so the lookup uses it
        (SQLite has one writer: a second connection would wait for this one)."""
        if version is not None:
            cached = self._cache.get((name, version))
            if cached is not None:
                return cached
        if tx is None:
            with self.store.reading() as reader:
                found_version, spec, registered_format = reader.workflow_spec(name, version)
        else:
            found_version, spec, registered_format = tx.workflow_spec(name, version)
        if not spec:
            which = f"{name} version {version}" if version is not None else name
            raise UnknownWorkflow(f"workflow {which} is not registered")
        cached = self._cache.get((name, found_version))
        if cached is not None:
            return cached
        definition = load_definition(
            spec,
            source=f"registered workflow {name}@{found_version}",
            registered=True,
            implied_format=registered_format,
        )
        with self._lock:
            self._cache[(name, found_version)] = definition
        return definition


class SentMarks:
    """Outbox ids published but not yet marked sent.

    Marking costs a write; rather than a commit of its own after every publish, the
    marks ride along with this process's next transaction, or a flush within a second
    when it is idle. A mark lost in a crash only means the relay publishes that message
    again, which the workers' idempotency turns into a no-op.
    """

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._lock = threading.Lock()

    def add(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._ids.extend(ids)

    def drain(self) -> list[int]:
        with self._lock:
            ids, self._ids = self._ids, []
        return ids


@dataclass(frozen=True)
class Restored:
    """A run as a worker read it before running a node: the row, the state as of its
    ``last_seq``, and the database's clock at the read (carried forward by a monotonic
    clock, so an event's time still comes from the one clock)."""

    row: Any
    state: RunState
    db_time: float
    read_at: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return self.db_time + (time.monotonic() - self.read_at)


@dataclass
class Completion:
    """What became of a worker's result."""

    recorded: bool
    reason: str = ""
    decision: Decision | None = None


@dataclass
class RunView:
    """A run as ``cairn status`` and ``cairn.get_run`` show it."""

    id: str
    workflow: str
    version: int
    status: RunStatus
    namespace: str
    request_id: str | None
    current: list[str]
    reason: str | None
    last_seq: int
    created_at: float
    updated_at: float
    state: RunState | None = None
    executions: list[dict[str, Any]] = field(default_factory=list)
    # Lineage of a fork: the run it was forked from, and after which of its events.
    parent_run_id: str | None = None
    fork_seq: int | None = None

    @property
    def result(self) -> dict[str, Any] | None:
        return self.state.vars if self.state is not None else None

    def to_dict(self) -> dict[str, Any]:
        data = {key: value for key, value in self.__dict__.items() if key != "state"}
        data["status"] = self.status.value
        if self.state is not None:
            data["vars"] = self.state.vars
            data["visits"] = self.state.visits
            data["nodes"] = {name: node.status.value for name, node in self.state.nodes.items()}
        return data


class Orchestrator:
    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        settings: Settings,
        registry: Registry | None = None,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.settings = settings
        self.registry = registry or Registry(store)
        self.sent = SentMarks()
        self.webhook_secrets = WebhookSecrets.from_settings(settings)
        # Counts anomalies fleet-wide (Runtime sets it to the leases' counters).
        # Called with each decision once it is committed (never for one rolled back): the
        # composition root registers what the world hears of it (anomaly alerts, counts).
        self.after_commit: list[AfterCommit] = []

    # -- submit -------------------------------------------------------------------------

    def submit(
        self,
        workflow: str,
        run_input: object = None,
        *,
        request_id: str | None = None,
        namespace: str = "default",
        version: int | None = None,
        webhook: str | None = None,
    ) -> str:
        """Start a run; the same (namespace, request id) returns the same run. Its end
        and milestones are announced to ``webhook``, if given (see docs/webhooks.md)."""
        webhook = self.check_webhook(webhook, namespace)
        with self.store.statements() as tx:
            found, now = tx.workflow_version(workflow, version)
        if found is None:
            which = f"{workflow} version {version}" if version is not None else workflow
            raise UnknownWorkflow(f"workflow {which} is not registered")
        definition = self.registry.get(workflow, found)
        payload = self.check_input(definition, run_input)
        values = _new_run(
            str(uuid.uuid4()),
            namespace,
            definition,
            payload,
            request_id=request_id,
            at=now,
            webhook=webhook,
        )
        run_id = self._submit_in_one_statement(values, definition, now)
        if run_id is not None:
            return run_id
        return self._submit_in_transaction(values, definition)

    def submit_batch(
        self, items: Sequence[SubmitItem], *, namespace: str = "default"
    ) -> list[Submitted]:
        """Start up to MAX_BATCH runs in one transaction; each item is answered on its
        own. An item that names an unknown workflow, or whose input does not match, is
        refused (and the others start); an item whose request id is taken — before, or
        by an earlier item of the batch — gets the run it already has."""
        if len(items) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH} runs, not {len(items)}")
        answers: list[Submitted | None] = [None] * len(items)
        accepted: list[tuple[int, dict[str, Any], WorkflowDefinition]] = []
        # The newest version is looked up once per workflow, not once per item.
        definitions: dict[tuple[str, int | None], WorkflowDefinition] = {}
        for index, item in enumerate(items):
            try:
                which = (item.workflow, item.version)
                if which not in definitions:
                    definitions[which] = self.registry.get(item.workflow, item.version)
                definition = definitions[which]
                payload = self.check_input(definition, item.input)
                webhook = self.check_webhook(item.webhook, namespace)
            except CairnError as refused:
                answers[index] = Submitted(index, error_code=refused.code, error=str(refused))
                continue
            run_id = str(uuid.uuid4())
            values = _new_run(
                run_id,
                namespace,
                definition,
                payload,
                request_id=item.request_id,
                at=0.0,
                webhook=webhook,
            )
            accepted.append((index, values, definition))
        messages: list[NodeMessage] = []
        with self.store.transaction() as tx:
            now = tx.now()
            stamp = from_epoch(now)
            slow = []
            pipelined = []
            for index, values, definition in accepted:
                values.update(created_at=stamp, updated_at=stamp)
                fresh = _FreshRun.of(values)
                state = RunState(values["id"], definition.name, definition.version)
                event = RunStarted(at=now, input=values["input"])
                _decision, plan = self._plan(fresh, definition, state, event)
                if plan is not None and not plan.writes_other_rows:
                    pipelined.append((index, values, plan, event))
                else:  # rows besides its own to write: the step's general path
                    slow.append((index, values, definition, state, event))
            # The common case: each run and its first step one statement, all pipelined.
            writes = [
                (values, self._writes(plan, event, [])) for _, values, plan, event in pipelined
            ]
            submitted = tx.submit_runs(writes) if writes else []
            for (index, values, plan, _), (inserted, ids) in zip(pipelined, submitted, strict=True):
                if inserted:
                    messages.extend(_with_outbox_ids(plan.dispatches, ids))
                    answers[index] = Submitted(index, values["id"], created=True)
                else:  # its request id is taken, before or by an earlier item
                    answers[index] = Submitted(index, self._existing_run(values, tx))
            for index, values, definition, state, event in slow:
                if not tx.insert_run(values):
                    answers[index] = Submitted(index, self._existing_run(values, tx))
                    continue
                row = tx.run(values["id"], lock=True)
                advanced = self._advance(tx, row, definition, state, event, last=False)
                messages.extend(advanced.messages)
                answers[index] = Submitted(index, values["id"], created=True)
        self._publish(messages)
        return [answer for answer in answers if answer is not None]

    def _submit_in_one_statement(
        self, values: dict[str, Any], definition: WorkflowDefinition, now: float
    ) -> str | None:
        """The run and its first step as one statement, when the first decision only
        dispatches (no timers to arm); None otherwise."""
        run_id = values["id"]
        fresh = _FreshRun.of(values)
        state = RunState(run_id, definition.name, definition.version)
        event = RunStarted(at=now, input=values["input"])
        decision, plan = self._plan(fresh, definition, state, event)
        if plan is None or plan.writes_other_rows:
            return None
        sent = self.sent.drain()
        with self.store.statements(writes=True) as tx:
            inserted, ids = tx.submit_run(values, self._writes(plan, event, sent))
        if not inserted:
            self.sent.add(sent)  # nothing was written, the marks included
            return self._existing_run(values)
        self._log_finish(run_id, decision)
        self._committed(run_id, decision)
        self._publish(_with_outbox_ids(plan.dispatches, ids))
        return str(run_id)

    def _submit_in_transaction(self, values: dict[str, Any], definition: WorkflowDefinition) -> str:
        run_id = values["id"]
        with self.store.transaction() as tx:
            if not tx.insert_run(values):  # the request id is taken
                return self._existing_run(values, tx)
            now = tx.now()
            state = RunState(run_id, definition.name, definition.version)
            row = tx.run(run_id, lock=True)
            advanced = self._advance(
                tx, row, definition, state, RunStarted(at=now, input=values["input"])
            )
        self._after_commit(advanced)
        return str(run_id)

    def _existing_run(self, values: Mapping[str, Any], tx: Tx | None = None) -> str:
        """The run a taken (namespace, request id) belongs to."""
        if values["request_id"] is None:
            raise StoreError(f"run id {values['id']} is taken")
        if tx is not None:
            row = tx.run_by_request(values["namespace"], values["request_id"])
        else:
            with self.store.reading() as reader:
                row = reader.run_by_request(values["namespace"], values["request_id"])
        return str(row.id)

    def check_webhook(self, url: str | None, namespace: str) -> str | None:
        """A run's webhook URL as stored, or :class:`InvalidInput`: a URL webhooks may
        call, for a namespace that has a secret to sign with (nothing is sent unsigned)."""
        if url is None:
            return None
        checked = check_url(url, self.settings.webhook_hosts)
        if not self.webhook_secrets.of(namespace):
            raise InvalidInput(
                f"webhook: namespace {namespace!r} has no signing secret "
                "(CAIRN_WEBHOOK_SECRETS): its runs cannot name a webhook"
            )
        return checked

    def check_input(self, definition: WorkflowDefinition, run_input: object) -> dict[str, Any]:
        """The input as it will be stored: a JSON object PostgreSQL can hold, within the
        size limit, matching the definition's schema; otherwise :class:`InvalidInput`."""
        if run_input is None:
            run_input = {}
        if not isinstance(run_input, Mapping):
            raise InvalidInput(f"the input must be a JSON object, not {type(run_input).__name__}")
        payload = dict(run_input)
        storable_json(payload, what="the input", limit_bytes=self.settings.max_payload_bytes)
        if definition.input_schema is not None:
            errors = sorted(
                Draft202012Validator(definition.input_schema).iter_errors(payload),
                key=lambda error: list(error.path),
            )
            if errors:
                details = "; ".join(
                    f"{'/'.join(map(str, error.path)) or '(input)'}: {error.message}"
                    for error in errors
                )
                raise InvalidInput(f"input does not match {definition.key}: {details}")
        return payload

    # -- advance ------------------------------------------------------------------------

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
            definition = self.registry.get(row.workflow, row.version, tx)
            state = self.restore(tx, row, definition)
            advanced = self._advance(tx, row, definition, state, make_event(now))
        self._after_commit(advanced)
        return advanced.decision

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
    ) -> Decision:
        """Deliver a decision from outside: a wait's signal, or an operator's recovery
        decision about a held node (``recovery.retry|complete|fail``). The same
        ``signal_id`` twice is applied once (the second decision says ``ignored``); a
        signal the run cannot take raises and writes nothing. ``node`` (and
        ``iteration``) name the wait or held node it answers."""
        if payload is not None and not isinstance(payload, Mapping):
            raise InvalidInput("a signal's payload is a JSON object")
        storable_json(
            payload or {}, what="the signal's payload", limit_bytes=self.settings.max_payload_bytes
        )
        received = SignalReceived(
            at=0.0,
            name=name,
            signal_id=signal_id or uuid.uuid4().hex,
            payload=dict(payload) if payload is not None else None,
            actor=actor,
            wait=node,
            iteration=iteration,
        )
        return self._apply_now(run_id, received)

    def _apply_now(self, run_id: str, event: Event) -> Decision:
        """Apply a request from outside (a signal, a cancel, a rollback), stamped with
        the database's clock."""
        decision = self.apply(run_id, partial(stamped, event))
        assert decision is not None  # no ``before`` that could decline
        return decision

    def complete(
        self,
        message: NodeMessage,
        outcome: NodeOutcome,
        worker: str,
        known: Restored | None = None,
        fence: int = ANY_FENCE,
    ) -> Completion:
        """Record a worker's result and advance the run with it, in one transaction.

        The first result for an execution wins; a second (a duplicate delivery, a stale
        worker) is discarded and changes nothing, and so is a result whose claim
        (``fence``) another worker has taken over since. ``known`` is the run as the
        worker read it before running: if the run has not moved since, the whole
        completion is one optimistic statement (PostgreSQL); otherwise the run is locked
        and read again.
        """
        if known is not None:
            completion = self._complete_optimistically(message, outcome, worker, known, fence)
            if completion is not None:
                return completion
        key = message.key
        try:
            with self.store.transaction() as tx:
                row, now = tx.finish_and_lock(
                    key, message.attempt, fence, _result_values(outcome, worker)
                )
                if row is None:
                    return Completion(
                        False, f"a result for {key} attempt {message.attempt} is already recorded"
                    )
                definition = self.registry.get(row.workflow, row.version, tx)
                if known is not None and known.row.last_seq == row.last_seq:
                    state = known.state
                else:
                    state = self.restore(tx, row, definition)
                event = replace(outcome.event, at=now)
                advanced = self._advance(tx, row, definition, state, event)
                if advanced.decision.ignored:
                    raise _Discard(advanced.decision)
        except _Discard as discard:  # the run has moved on: keep nothing of this result
            return Completion(False, discard.decision.ignored or "", discard.decision)
        self._after_commit(advanced)
        return Completion(True, decision=advanced.decision)

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
                    first.key, first.attempt, fence, _result_values(first_outcome, worker)
                )
                if row is None:
                    return Completion(
                        False, f"a result for {first.key} attempt {first.attempt} is recorded"
                    )
                definition = self.registry.get(row.workflow, row.version, tx)
                state = self.restore(tx, row, definition)
                advanced = self._advance(
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
                        message.key, message.attempt, fence, _result_values(outcome, worker)
                    )
                    assert row is not None  # its execution row was inserted just now
                    state = advanced.decision.state
                    posted = advanced.posted
                    advanced = self._advance(
                        tx, row, definition, state, replace(outcome.event, at=now), last=False
                    )
                    advanced.posted[:0] = posted
                advanced.messages[:0] = sent
        except _Discard as discard:
            return Completion(False, discard.decision.ignored or "", discard.decision)
        self._after_commit(advanced)
        return Completion(True, decision=advanced.decision)

    def _complete_optimistically(
        self, message: NodeMessage, outcome: NodeOutcome, worker: str, known: Restored, fence: int
    ) -> Completion | None:
        """One round trip when the run is where the worker left it and the decision only
        dispatches; None means: take the locking path."""
        definition = self.registry.get(message.workflow, message.version)
        event = replace(outcome.event, at=known.now())
        decision, plan = self._plan(known.row, definition, known.state, event)
        if plan is None or plan.writes_other_rows:
            return None
        sent = self.sent.drain()
        with self.store.statements(writes=True) as tx:
            checked, finished, ids = tx.complete_step(
                message.key,
                attempt=message.attempt,
                fence=fence,
                known_seq=known.row.last_seq,
                result=_result_values(outcome, worker),
                writes=self._writes(plan, event, sent),
            )
        if not (checked and finished):
            self.sent.add(sent)  # nothing was written, the marks included
            if not checked:
                return None
            return Completion(
                False, f"a result for {message.key} attempt {message.attempt} is already recorded"
            )
        self._log_finish(message.run_id, decision)
        self._committed(message.run_id, decision)
        self._publish(_with_outbox_ids(plan.dispatches, ids))
        return Completion(True, decision=decision)

    def record(self, run_id: str, kind: str, data: Mapping[str, Any]) -> int | None:
        """Append an audit event (``audit.<kind>``): history for people, never input to
        the decider. Returns its seq; None if there is no such run."""
        with self.store.transaction() as tx:
            row, now = tx.lock_run(run_id)
            if row is None:
                return None
            seq = row.last_seq + 1
            cached = row.state  # the state does not change: the cache stays true
            run_values = {
                "status": row.status,
                "last_seq": seq,
                "updated_at": from_epoch(now),
                "current": list(row.current),
                "reason": row.reason,
                "state": json.dumps(cached, separators=(",", ":")) if cached else None,
            }
            event = {"type": f"{AUDIT_ONLY}.{kind}", "at": now, **data}
            tx.write_step(
                run_id,
                StepWrites(run_values, event, outcome={}, sent=self.sent.drain(), dispatches=[]),
            )
        return int(seq)

    def record_recovery(self, message: NodeMessage, *, cause: str, recoveries: int) -> None:
        """A recovery in the run's history (``audit.recovered``): what runs again and why,
        from which checkpoint, and which nodes it skips because they are done."""
        run, _definition, state = self.load(message.run_id)
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

    def stop_requested(self, key: ExecutionKey, attempt: int) -> bool:
        """True once the run is being cancelled or no longer waits for this execution
        (asked by heartbeats, for ``ctx.cancelled``)."""
        with self.store.statements() as tx:
            return tx.stop_requested(key, attempt)

    def cancel(self, run_id: str, reason: str, *, actor: str | None = None) -> Decision:
        """Cancel a run: it moves to ``cancelling`` at once (nothing new is dispatched,
        queued nodes become no-ops, running handlers see ``ctx.cancelled``), and ends
        ``cancelled`` once its running nodes have stopped or ``cancel_timeout`` passed.
        A finished run raises :class:`IllegalTransition` and nothing is written; a second
        cancel changes nothing (``ignored``)."""
        requested = CancelRequested(at=0.0, reason=reason, actor=actor)
        return self._apply_now(run_id, requested)

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
        rewind = None if to_seq is None else self.checkpoint(run_id, to_seq).to_dict()
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

    def checkpoint(self, run_id: str, seq: int, *, latest: bool = False) -> RunState:
        """The state a rollback may rewind to: after a decision (not an audit entry)
        before the latest (``latest``: or the latest itself, for a fork), with the run
        going and no parallel section half joined."""
        with self.store.reading() as tx:
            row = tx.run(run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id}")
            last = row.last_seq if latest else row.last_seq - 1
            entries = tx.events_after(run_id, seq - 1, seq) if seq >= 1 else []
            if not entries or entries[0].type.startswith(AUDIT_ONLY) or seq > last:
                raise InvalidInput(
                    f"run {run_id} has no checkpoint at seq {seq}: pick the seq of a decision "
                    f"(not an audit entry) from 1 to {last} (cairn events)"
                )
            definition = self.registry.get(row.workflow, row.version, tx)
            state = self.restore(tx, row, definition, upto=seq)
        if state.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            raise InvalidInput(f"at seq {seq} run {run_id} was {state.status.value}: not resumable")
        if any(not join.done for join in state.joins.values()):
            raise InvalidInput(
                f"at seq {seq} run {run_id} was inside a parallel section; roll back to a "
                "seq before its fan-out or after its join"
            )
        return state

    def fenced_out(self, key: ExecutionKey, fence: int) -> bool:
        """True if a claim newer than ``fence`` took the execution over."""
        with self.store.reading() as tx:
            return tx.execution_fence(key) > fence

    def _writes(self, plan: Orchestrator._Plan, event: Event, sent: Sequence[int]) -> StepWrites:
        snapshot = None
        if plan.snapshot is not None:
            codec, body = encode_snapshot(plan.snapshot, self.settings.snapshot_compress_bytes)
            snapshot = (STATE_FORMAT, codec, body)
        return StepWrites(
            run=plan.run_values,
            event=event_to_dict(event),
            outcome=_outcome(plan.decision),
            sent=sent,
            dispatches=[(m.key, m.attempt, m.to_dict()) for m in plan.dispatches],
            snapshot=snapshot,
            armed=plan.armed,
            disarmed=plan.disarmed,
        )

    def restore(
        self, tx: Tx, row: Any, definition: WorkflowDefinition, upto: int | None = None
    ) -> RunState:
        """The run's state after event ``upto`` (default: its latest).

        The latest is cached on the run row; any other (or an uncached one) is the latest
        snapshot at or before ``upto`` plus the events after it, replayed.
        """
        upto = row.last_seq if upto is None else upto
        if upto == row.last_seq and row.state is not None:
            return RunState.from_dict(row.state)
        snapshot = tx.latest_snapshot(row.id, at_or_before=upto)
        if snapshot is None:
            state = RunState(row.id, definition.name, definition.version)
            after = 0
        else:
            state, after = RunState.from_dict(snapshot.state), snapshot.seq
        for _event_row, replayed in replay(definition, state, tx.events_after(row.id, after, upto)):
            state = replayed
        return state

    @dataclass
    class _Advanced:
        decision: Decision
        messages: list[NodeMessage]
        # Inbox entries (id, run) this transaction posted for other runs.
        posted: list[tuple[int, str]] = field(default_factory=list)

    @dataclass
    class _Plan:
        """What one decision writes: computed before any write, carried out by either path."""

        decision: Decision
        run_values: dict[str, Any]  # "last_seq": the event's seq; "state": JSON text, if cached
        snapshot: str | None  # the state as JSON text, when a snapshot is due
        dispatches: list[NodeMessage]
        row_commands: Sequence[Command]  # cancellations, holds, children: other rows
        notices: Sequence[Notice]  # for the run's webhook
        armed: Sequence[tuple[str, float]]  # the run's timers: (id, due at) ...
        disarmed: Sequence[str]  # ... and ids, the decision's net effect on them

        @property
        def writes_other_rows(self) -> bool:
            """Rows besides the run's, its event and its dispatches: not for the
            one-statement paths."""
            return bool(self.row_commands or self.notices)

    def _plan(
        self, row: Any, definition: WorkflowDefinition, state: RunState, event: Event
    ) -> tuple[Decision, Orchestrator._Plan | None]:
        """Decide, and work out every row the decision writes (None if it was ignored)."""
        decision = decide(definition, state, event)
        if decision.ignored:
            return decision, None
        new = decision.state
        seq = row.last_seq + 1
        values: dict[str, Any] = {
            "status": new.status.value,
            "last_seq": seq,
            "updated_at": from_epoch(event.at),
            "current": sorted(f"{n.node}#{n.iteration}" for n in new.active_nodes),
            "reason": new.reason,
        }
        if new.status.terminal:
            values["finished_at"] = from_epoch(event.at)
        # Serialized once, for the row's cache and a snapshot alike: an agent's state with
        # its message history is the largest thing a step writes.
        state_json = json.dumps(new.to_dict(), separators=(",", ":"))
        cacheable = 0 < len(state_json) <= self.settings.state_cache_bytes
        values["state"] = state_json if cacheable else None
        snapshot = None
        if self._snapshot_due(row, new, seq, event.at):
            snapshot = state_json
            values.update(snapshot_seq=seq, snapshot_at=from_epoch(event.at))
        dispatches = [
            NodeMessage(
                row.id,
                definition.name,
                definition.version,
                c.node,
                c.iteration,
                c.attempt,
                c.phase,
                resumed=c.resumed,
            )
            for c in decision.commands
            if isinstance(c, Dispatch)
        ]
        row_commands = [c for c in decision.commands if isinstance(c, ROW_COMMANDS)]
        announced = (
            notices(state, new, decision.commands, seq, row.namespace) if row.webhook_url else []
        )
        armed, disarmed = _net_timers(decision.commands)
        return decision, self._Plan(
            decision, values, snapshot, dispatches, row_commands, announced, armed, disarmed
        )

    def _advance(
        self,
        tx: Tx,
        row: Any,
        definition: WorkflowDefinition,
        state: RunState,
        event: Event,
        *,
        last: bool = True,
    ) -> Orchestrator._Advanced:
        """Decide and write one step. ``last``: it is the transaction's last write, which
        commits it; otherwise the caller's transaction goes on (and commits later)."""
        decision, plan = self._plan(row, definition, state, event)
        if plan is None:
            return self._Advanced(decision, [])
        others = self._Advanced(plan.decision, [])
        self._carry_out(tx, row, plan, others)
        self._log_finish(row.id, plan.decision)
        outbox_ids = tx.write_step(row.id, self._writes(plan, event, self.sent.drain()), last=last)
        others.messages[:0] = [
            replace(m, outbox_id=i) for m, i in zip(plan.dispatches, outbox_ids, strict=True)
        ]
        return others

    @staticmethod
    def _log_finish(run_id: str, decision: Decision) -> None:
        for command in decision.commands:
            if isinstance(command, FinishRun):
                log.info(
                    "run %s %s%s",
                    run_id,
                    command.status.value,
                    f": {command.reason}" if command.reason else "",
                )

    def _snapshot_due(self, row: Any, new: RunState, seq: int, at: float) -> bool:
        """Snapshots compress the log: every K events, every T seconds, and whenever the
        run parks (waits) or ends, so that restoring a parked run replays nothing."""
        if new.status in (RunStatus.WAITING,) or new.status.terminal:
            return True
        if seq - row.snapshot_seq >= self.settings.snapshot_every_events:
            return True
        last = (row.snapshot_at or row.created_at).timestamp()
        return bool(at - last >= self.settings.snapshot_every_s)

    def _carry_out(
        self, tx: Tx, row: Any, plan: Orchestrator._Plan, advanced: Orchestrator._Advanced
    ) -> None:
        """The rows a decision changes besides the step's own: timers, cancellations,
        held executions (held, or settled by an operator), child runs started, and
        events for other runs (the child runs' messages and the inbox entries are added
        to ``advanced``, to be sent once committed)."""
        new = plan.decision.state
        for command in plan.row_commands:
            if isinstance(command, CancelNode | DetachNode):
                # The run no longer waits for this execution: a late result must not count.
                node = new.nodes.get(command.node)
                if node is not None and not node.active:
                    key = ExecutionKey(row.id, command.node, command.iteration, Phase.RUN.value)
                    tx.set_execution_status(key, node.status.value)
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
        self,
        tx: Tx,
        parent: Any,
        command: StartChild,
        at: float | None,
        advanced: Orchestrator._Advanced,
    ) -> None:
        """Insert the child run and take its first step, in the parent's transaction.
        Its id derives from the parent execution: started twice is started once."""
        at = at if at is not None else utcnow().timestamp()
        link = {
            "run_id": parent.id,
            "node": command.node,
            "iteration": command.iteration,
            "attempt": command.attempt,
            "correlation_id": command.correlation_id,
            "depth": command.depth,
        }
        refused: str | None = None
        try:
            definition = self.registry.get(command.workflow, command.version, tx)
            payload = self.check_input(definition, command.input)
        except (UnknownWorkflow, InvalidInput) as exc:
            refused = str(exc)
        if refused is not None:  # the parent's node fails; nothing else can be done here
            finished = ChildFinished(
                at=at,
                node=command.node,
                iteration=command.iteration,
                attempt=command.attempt,
                child_run_id=command.run_id,
                correlation_id=command.correlation_id,
                status=RunStatus.FAILED.value,
                reason=f"the child run could not start: {refused}",
            )
            advanced.posted.append((tx.post(parent.id, event_to_dict(finished)), parent.id))
            return
        values = _new_run(
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
        started = RunStarted(at=at, input=payload, parent=link, budget=command.budget)
        state = RunState(command.run_id, definition.name, definition.version)
        child = self._advance(
            tx, tx.run(command.run_id, lock=True), definition, state, started, last=False
        )
        advanced.messages.extend(child.messages)
        advanced.posted.extend(child.posted)

    def _after_commit(self, advanced: Orchestrator._Advanced) -> None:
        self._committed(advanced.decision.state.run_id, advanced.decision)
        self._publish(advanced.messages)
        if advanced.posted:
            fault_point("inbox.after_commit")
        for entry, run_id in advanced.posted:
            try:
                self.deliver(entry, run_id)
            except Exception:  # committed already: the scheduler will deliver it
                log.warning(
                    "delivering inbox entry %d to run %s failed", entry, run_id, exc_info=True
                )

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

    def _publish(self, messages: Sequence[NodeMessage]) -> None:
        if not messages:
            return
        fault_point("publish.after_commit")
        try:
            taken = self.publisher.publish(messages)
        except Exception:  # committed already: the relay will publish these
            log.warning(
                "publishing %d message(s) failed; the relay will retry",
                len(messages),
                exc_info=True,
            )
            return
        if taken:
            self.sent.add(m.outbox_id for m in messages if m.outbox_id is not None)

    def _committed(self, run_id: str, decision: Decision) -> None:
        for hook in self.after_commit:
            try:
                hook(run_id, decision)
            except Exception:  # the decision stands; what reports it must not undo it
                log.warning("an after-commit hook failed for run %s", run_id, exc_info=True)

    def flush_sent(self) -> None:
        ids = self.sent.drain()
        if ids:
            with self.store.transaction() as tx:
                tx.mark_sent(ids)

    # -- reading ------------------------------------------------------------------------

    def load(
        self, run_id: str, upto: int | None = None
    ) -> tuple[Any, WorkflowDefinition, RunState]:
        with self.store.reading() as tx:
            row = tx.run(run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id}")
            definition = self.registry.get(row.workflow, row.version, tx)
            return row, definition, self.restore(tx, row, definition, upto)

    def get_run(self, run_id: str, *, with_executions: bool = False) -> RunView:
        row, _definition, state = self.load(run_id)
        view = RunView(
            id=row.id,
            workflow=row.workflow,
            version=row.version,
            status=RunStatus(row.status),
            namespace=row.namespace,
            request_id=row.request_id,
            current=list(row.current),
            reason=row.reason,
            last_seq=row.last_seq,
            created_at=row.created_at.timestamp(),
            updated_at=row.updated_at.timestamp(),
            state=state,
            parent_run_id=row.parent_run_id,
            fork_seq=row.fork_seq,
        )
        if with_executions:
            with self.store.reading() as tx:
                view.executions = [
                    {
                        "node": e.node,
                        "iteration": e.iteration,
                        "phase": e.phase,
                        "status": e.status,
                        "attempt": e.attempt,
                        "worker": e.worker,
                        "duration_s": e.duration_s,
                        "error": e.error,
                    }
                    for e in tx.executions_of(run_id)
                ]
        return view

    def waiting(self, namespace: str | None = None, limit: int = 100) -> list[Awaiting]:
        """What every parked run waits for (a signal, an operator), longest first."""
        found: list[Awaiting] = []
        with self.store.reading() as tx:
            for row in tx.waiting_runs(namespace, limit):
                definition = self.registry.get(row.workflow, row.version, tx)
                found.extend(awaiting(definition, self.restore(tx, row, definition)))
        return sorted(found, key=lambda entry: entry.since)

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        with self.store.reading() as tx:
            if tx.run(run_id) is None:
                raise RunNotFound(f"no run {run_id}")
            return [
                {"seq": e.seq, "type": e.type, "at": e.at, "data": e.data, "outcome": e.outcome}
                for e in tx.events_after(run_id, after)
            ]

    # -- fork ---------------------------------------------------------------------------

    def fork(
        self,
        run_id: str,
        at_seq: int,
        state: RunState,
        *,
        patch: Mapping[str, Any] | None = None,
        confirm: bool = False,
    ) -> str:
        """Start a live fork of ``run_id``: a new run in its namespace, linked to it
        (``parent_run_id``, ``fork_seq``), that starts from ``state`` — the parent's
        checkpoint after event ``at_seq`` (:meth:`checkpoint`), with ``patch`` applied —
        through a ``run_forked`` event, and is dispatched like any run. Its effects get
        keys of their own (:func:`cairn.effects.ledger.effect_scope`). It must be
        ``confirm``-ed; returns the new run's id."""
        if not confirm:
            raise ConfirmationRequired(
                f"a live fork of run {run_id} is a real run: its effects reach the outside "
                "world, under fresh keys; confirm it (--yes, confirm=True)"
            )
        with self.store.transaction() as tx:
            parent = tx.run(run_id)
            if parent is None:
                raise RunNotFound(f"no run {run_id}")
            definition = self.registry.get(parent.workflow, parent.version, tx)
            now = tx.now()
            fork_id = str(uuid.uuid4())
            values = _new_run(
                fork_id, parent.namespace, definition, parent.input, request_id=None, at=now
            )
            tx.insert_run({**values, "parent_run_id": run_id, "fork_seq": at_seq})
            forked = RunForked(
                at=now,
                parent_run_id=run_id,
                fork_seq=at_seq,
                state=state.to_dict(),
                patch=dict(patch) if patch is not None else None,
            )
            fresh = RunState(fork_id, definition.name, definition.version)
            advanced = self._advance(tx, tx.run(fork_id, lock=True), definition, fresh, forked)
        log.info("run %s forked from run %s at seq %d", fork_id, run_id, at_seq)
        self._after_commit(advanced)
        return fork_id


def replay(
    definition: WorkflowDefinition, state: RunState, event_rows: Iterable[Any]
) -> Iterator[tuple[Any, RunState]]:
    """Each logged event with the run's state after it: the log folded into ``state`` (the
    state before the first of them) through the decider. Audit entries are history, not
    the decider's input: the state after one is the state before it."""
    for event_row in event_rows:
        if not event_row.type.startswith(AUDIT_ONLY):
            state = decide(definition, state, event_from_dict(event_row.data)).state
        yield event_row, state


@dataclass(frozen=True)
class _FreshRun:
    """What planning a run's first step reads of its row, before the row exists."""

    id: str
    created_at: datetime
    namespace: str
    webhook_url: str | None
    last_seq: int = 0
    snapshot_seq: int = 0
    snapshot_at: datetime | None = None

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> _FreshRun:
        return cls(values["id"], values["created_at"], values["namespace"], values["webhook_url"])


def _new_run(
    run_id: str,
    namespace: str,
    definition: WorkflowDefinition,
    payload: Mapping[str, Any],
    *,
    request_id: str | None,
    at: float,
    webhook: str | None = None,
) -> dict[str, Any]:
    """The row of a run about to start."""
    stamp = from_epoch(at)
    return {
        "id": run_id,
        "namespace": namespace,
        "workflow": definition.name,
        "version": definition.version,
        "status": RunStatus.PENDING.value,
        "input": payload,
        "request_id": request_id,
        "webhook_url": webhook,
        "current": [],
        "created_at": stamp,
        "updated_at": stamp,
    }


def _with_outbox_ids(
    dispatches: Sequence[NodeMessage], ids: Mapping[tuple[str, int, str], int]
) -> list[NodeMessage]:
    return [replace(m, outbox_id=ids[(m.node, m.iteration, m.phase.value)]) for m in dispatches]


def _result_values(outcome: NodeOutcome, worker: str) -> dict[str, Any]:
    """The idempotency row's columns for a worker's result."""
    return {
        "status": outcome.status.value,
        "result": dict(outcome.result) if outcome.result is not None else None,
        "error_class": outcome.error_class,
        "error": outcome.error,
        "finished_at": utcnow(),
        "duration_s": outcome.duration_s,
        "worker": worker,
    }


class _Discard(Exception):  # control flow: rolls the transaction back
    def __init__(self, decision: Decision) -> None:
        self.decision = decision


def _outcome(decision: Decision) -> dict[str, Any]:
    """What the decision did, kept beside its event for people reading the history."""
    commands = []
    for command in decision.commands:
        entry = {"command": type(command).__name__}
        entry.update(
            {k: (v.value if hasattr(v, "value") else v) for k, v in command.__dict__.items()}
        )
        commands.append(entry)
    return {
        "status": decision.state.status.value,
        "transitions": [[t.source, t.label, t.target] for t in decision.transitions],
        "commands": commands,
    }


def _net_timers(commands: Sequence[Command]) -> tuple[list[tuple[str, float]], list[str]]:
    """What a decision's timer commands leave, in order: the timers armed (id, due at)
    and those disarmed, disjoint — one statement writes both, so no row may be in both."""
    final: dict[str, float | None] = {}
    for command in commands:
        if isinstance(command, ArmTimer):
            final[command.timer_id] = command.due_at
        elif isinstance(command, DisarmTimer):
            final[command.timer_id] = None
    armed = [(timer_id, due) for timer_id, due in final.items() if due is not None]
    return armed, [timer_id for timer_id, due in final.items() if due is None]
