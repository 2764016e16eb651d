"""Starting runs: one, a batch, or a live fork. A run and its first step are written
together — one statement where the backend has one and the first decision writes no
other rows, else one transaction. The same (namespace, request id) is the same run."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from cairn.engine.advance import Steps
from cairn.engine.batches import MAX_BATCH, SubmitItem, Submitted
from cairn.engine.inputs import FreshRun, check_input, new_run
from cairn.engine.notices import WebhookPolicy
from cairn.engine.outbox import with_outbox_ids
from cairn.engine.pauses import PauseBook, hold_in
from cairn.engine.plan import Plan
from cairn.engine.reads import Restored
from cairn.engine.starts import Starts
from cairn.errors import (
    CairnError,
    ConfirmationRequired,
    InvalidInput,
    RunNotFound,
    StoreError,
)
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import RunForked, RunStarted
from cairn.model.messages import NodeMessage
from cairn.model.priority import check_priority
from cairn.model.starts import Debounce, Singleton
from cairn.model.state import RunState
from cairn.store.records import from_epoch
from cairn.store.sql import Tx

log = logging.getLogger(__name__)


class Submissions:
    def __init__(
        self, steps: Steps, webhooks: WebhookPolicy, book: PauseBook, *, limit_bytes: int
    ) -> None:
        self.steps = steps
        self.store = steps.store
        self.registry = steps.registry
        self.webhooks = webhooks
        self.book = book
        self.limit_bytes = limit_bytes
        self.starts = Starts(steps, webhooks, book, limit_bytes=limit_bytes)

    def check_input(self, definition: WorkflowDefinition, run_input: object) -> dict[str, Any]:
        """The input as it will be stored, or :class:`InvalidInput`."""
        return check_input(definition, run_input, limit_bytes=self.limit_bytes)

    def submit(
        self,
        workflow: str,
        run_input: object = None,
        *,
        request_id: str | None = None,
        namespace: str = "default",
        version: int | None = None,
        webhook: str | None = None,
        debounce: Debounce | None = None,
        singleton: Singleton | None = None,
        priority: int | None = None,
        actor: str | None = None,
    ) -> str:
        """Start a run; the same (namespace, request id) returns the same run. Its end
        and milestones are announced to ``webhook``, if given (see docs/webhooks.md).
        ``debounce`` collapses rapid submissions with its key into one run, started once
        they pause; ``singleton`` keeps one unfinished run per key; ``priority`` (-5..5,
        default 0) puts it ahead of lower ones for slots and workers (docs/flow-control.md).
        ``actor``: who starts it (the principal, ``<kind>:<name>``), in its first event."""
        level = check_priority(priority)
        if debounce is not None or singleton is not None:
            return self._submit_controlled(
                workflow,
                run_input,
                request_id=request_id,
                namespace=namespace,
                version=version,
                webhook=webhook,
                debounce=debounce,
                singleton=singleton,
                priority=level,
                actor=actor,
            )
        webhook = self.webhooks.check(webhook, namespace)
        # One read: what the name means to the namespace, and the database's clock.
        definition, now = self.registry.visible(namespace, workflow, version)
        payload = self.check_input(definition, run_input)
        values = new_run(
            str(uuid.uuid4()),
            namespace,
            definition,
            payload,
            request_id=request_id,
            at=now,
            webhook=webhook,
            priority=level,
        )
        if self.book.workflow_paused(namespace, definition.name):
            with self.store.transaction() as tx:
                held = hold_in(tx, values, definition.name, actor)
            if held is not None:
                return held
        run_id = self._submit_in_one_statement(values, definition, now, actor)
        if run_id is not None:
            return run_id
        return self._submit_in_transaction(values, definition, actor)

    def _submit_controlled(
        self,
        workflow: str,
        run_input: object,
        *,
        request_id: str | None,
        namespace: str,
        version: int | None,
        webhook: str | None,
        debounce: Debounce | None,
        singleton: Singleton | None,
        priority: int = 0,
        actor: str | None = None,
    ) -> str:
        if debounce is not None and singleton is not None:
            raise InvalidInput("a submission is debounced or a singleton, not both")
        if debounce is not None:
            if request_id is not None:
                # Many submissions become one run, which can carry one request id only.
                raise InvalidInput("a debounced submission takes no request id")
            return self.starts.submit_debounced(
                workflow,
                run_input,
                debounce,
                namespace=namespace,
                version=version,
                webhook=webhook,
                priority=priority,
                actor=actor,
            )
        assert singleton is not None
        return self.starts.submit_singleton(
            workflow,
            run_input,
            singleton,
            namespace=namespace,
            request_id=request_id,
            version=version,
            webhook=webhook,
            priority=priority,
            actor=actor,
        )

    def submit_batch(
        self, items: Sequence[SubmitItem], *, namespace: str = "default", actor: str | None = None
    ) -> list[Submitted]:
        """Start up to MAX_BATCH runs in one transaction; each item is answered on its
        own. An item that names an unknown workflow, or whose input does not match, is
        refused (and the others start); an item whose request id is taken — before, or
        by an earlier item of the batch — gets the run it already has."""
        if len(items) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH} runs, not {len(items)}")
        answers: list[Submitted | None] = [None] * len(items)
        accepted = self._accepted(items, namespace, answers)
        messages: list[NodeMessage] = []
        planner = self.steps.planner
        with self.store.transaction() as tx:
            now = tx.now()
            stamp = from_epoch(now)
            slow = []
            pipelined: list[tuple[int, dict[str, Any], Plan, RunStarted]] = []
            for index, values, definition in accepted:
                values.update(created_at=stamp, updated_at=stamp)
                if self.book.workflow_paused(namespace, definition.name):
                    held = hold_in(tx, values, definition.name, actor)
                    if held is not None:
                        answers[index] = Submitted(index, held, created=held == values["id"])
                        continue
                state = RunState(values["id"], definition.name, definition.version)
                event = RunStarted(at=now, input=values["input"], actor=actor)
                _decision, plan = planner.plan(FreshRun.of(values), definition, state, event)
                if plan is not None and not plan.writes_other_rows:
                    pipelined.append((index, values, plan, event))
                else:  # rows besides its own to write: the step's general path
                    slow.append((index, values, definition, state, event))
            # The common case: each run and its first step one statement, all pipelined.
            writes = [
                (values, planner.writes(plan, event, [])) for _, values, plan, event in pipelined
            ]
            submitted = tx.submit_runs(writes) if writes else []
            for (index, values, plan, _), (inserted, ids) in zip(pipelined, submitted, strict=True):
                if inserted:
                    messages.extend(with_outbox_ids(plan.dispatches, ids))
                    answers[index] = Submitted(index, values["id"], created=True)
                else:  # its request id is taken, before or by an earlier item
                    answers[index] = Submitted(index, self._existing_run(values, tx))
            for index, values, definition, state, event in slow:
                if not tx.insert_run(values):
                    answers[index] = Submitted(index, self._existing_run(values, tx))
                    continue
                row = tx.inserted_run(values["id"])
                advanced = self.steps.advance(tx, row, definition, state, event, last=False)
                messages.extend(advanced.messages)
                answers[index] = Submitted(index, values["id"], created=True)
        self.steps.outbox.publish(messages)
        return [answer for answer in answers if answer is not None]

    def _accepted(
        self, items: Sequence[SubmitItem], namespace: str, answers: list[Submitted | None]
    ) -> list[tuple[int, dict[str, Any], WorkflowDefinition]]:
        """The batch's items that may start, each as (index, run row, definition); each
        refused one answered in ``answers``, by its index."""
        accepted: list[tuple[int, dict[str, Any], WorkflowDefinition]] = []
        # The newest version is looked up once per workflow, not once per item.
        definitions: dict[tuple[str, int | None], WorkflowDefinition] = {}
        for index, item in enumerate(items):
            try:
                which = (item.workflow, item.version)
                if which not in definitions:
                    definitions[which] = self.registry.resolve_for(
                        namespace, item.workflow, item.version
                    )
                definition = definitions[which]
                payload = self.check_input(definition, item.input)
                webhook = self.webhooks.check(item.webhook, namespace)
                level = check_priority(item.priority)
            except CairnError as refused:
                answers[index] = Submitted(index, error_code=refused.code, error=str(refused))
                continue
            values = new_run(
                str(uuid.uuid4()),
                namespace,
                definition,
                payload,
                request_id=item.request_id,
                at=0.0,
                webhook=webhook,
                priority=level,
            )
            accepted.append((index, values, definition))
        return accepted

    def fork(
        self,
        run_id: str,
        at_seq: int,
        state: RunState,
        *,
        patch: Mapping[str, Any] | None = None,
        confirm: bool = False,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Start a live fork of ``run_id``: a new run in its namespace, linked to it
        (``parent_run_id``, ``fork_seq``), that starts from ``state`` — the parent's
        checkpoint after event ``at_seq`` (:meth:`Reads.checkpoint`), with ``patch``
        applied — through a ``run_forked`` event, and is dispatched like any run. Its
        effects get keys of their own (:func:`cairn.effects.ledger.effect_scope`). It
        must be ``confirm``-ed; returns the new run's id — or, asked again with the same
        ``request_id``, the id of the fork that request started."""
        if not confirm:
            raise ConfirmationRequired(
                f"a live fork of run {run_id} is a real run: its effects reach the outside "
                "world, under fresh keys; confirm it (--yes, confirm=True)"
            )
        with self.store.transaction() as tx:
            parent = tx.run(run_id)
            if parent is None:
                raise RunNotFound(f"no run {run_id}")
            if request_id is not None:
                started = tx.runs_by_requests(parent.namespace, [request_id])
                if started:
                    return started[0].id
            definition = self.registry.get(parent.workflow_ref, parent.version, tx)
            now = tx.now()
            fork_id = str(uuid.uuid4())
            values = new_run(
                fork_id,
                parent.namespace,
                definition,
                parent.input,
                request_id=request_id,
                at=now,
                priority=parent.priority,
            )
            tx.insert_run({**values, "parent_run_id": run_id, "fork_seq": at_seq})
            forked = RunForked(
                at=now,
                parent_run_id=run_id,
                fork_seq=at_seq,
                state=state.to_dict(),
                patch=dict(patch) if patch is not None else None,
                actor=actor,
            )
            fresh = RunState(fork_id, definition.name, definition.version)
            advanced = self.steps.advance(tx, tx.inserted_run(fork_id), definition, fresh, forked)
        log.info("run %s forked from run %s at seq %d", fork_id, run_id, at_seq)
        self.steps.after_commit(advanced)
        return fork_id

    def _submit_in_one_statement(
        self, values: dict[str, Any], definition: WorkflowDefinition, now: float, actor: str | None
    ) -> str | None:
        """The run and its first step as one statement, when the first decision only
        dispatches (no other rows to write); None otherwise."""
        run_id = values["id"]
        state = RunState(run_id, definition.name, definition.version)
        # The run as its insert leaves it, by the clock ``now`` was just read from.
        known = Restored(FreshRun.record(values), state, now)
        event = RunStarted(at=now, input=values["input"], actor=actor)
        planner = self.steps.planner
        decision, plan = planner.plan(FreshRun.of(values), definition, state, event)
        if plan is None or plan.writes_other_rows:
            return None
        sent = self.steps.outbox.sent.drain()
        with self.store.statements(writes=True) as tx:
            inserted, ids = tx.submit_run(values, planner.writes(plan, event, sent))
        if not inserted:
            self.steps.outbox.sent.add(sent)  # nothing was written, the marks included
            return self._existing_run(values)
        if self.steps.starts_leave_heads:  # its first nodes begin from it, if run here
            self.steps.heads.committed(known, plan.run, decision.state)
        self.steps.committed_plan(run_id, plan, ids)
        return str(run_id)

    def _submit_in_transaction(
        self, values: dict[str, Any], definition: WorkflowDefinition, actor: str | None
    ) -> str:
        run_id = values["id"]
        with self.store.transaction() as tx:
            if not tx.insert_run(values):  # the request id is taken
                return self._existing_run(values, tx)
            now = tx.now()
            state = RunState(run_id, definition.name, definition.version)
            row = tx.inserted_run(run_id)
            started = RunStarted(at=now, input=values["input"], actor=actor)
            advanced = self.steps.advance(tx, row, definition, state, started)
        self.steps.after_commit(advanced)
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
        if row is None:  # the run that took it was deleted meanwhile (retention)
            raise StoreError(f"request id {values['request_id']!r} was taken, then freed")
        return row.id
