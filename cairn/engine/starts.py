"""Which submissions start a run: debounce and singleton, and the two moves they and schedules
make inside a transaction of their own — start a run, cancel one.

**Debounce.** The first submission with a key creates the run at once, ``pending`` with
no event (so every caller has its id and the run is committed: it will end), and opens a
window (``debounces``) that says when it starts. Each later submission within the window
gives the pending run its input and moves the start on by its wait, never past the first
submission plus ``max_wait``. The scheduler starts the run when the window is due — it
takes the window and writes the run's first step in one transaction, so a run starts
once — and a submission after that opens a new window. A pending run can be cancelled
like any run (it ends ``cancelled`` at once).

**Singleton.** A submission claims the key's row or locks it, then reads whether the run
it names has ended; two submissions with one key queue on that row, so they never both
find the key free. ``skip`` answers with the unfinished run; ``cancel`` cancels it and
starts the new run in the same transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from cairn.engine.advance import Advanced, Steps
from cairn.engine.inputs import check_input, new_run
from cairn.engine.notices import WebhookPolicy
from cairn.engine.pauses import PauseBook, hold_in
from cairn.engine.reads import restore
from cairn.errors import FlowConflict, StoreError
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import CancelRequested, RunStarted
from cairn.model.pauses import HeldStart, PauseKind
from cairn.model.starts import Debounce, Singleton, SingletonMode
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.store.records import DebounceRecord
from cairn.store.sql import Tx

log = logging.getLogger(__name__)

# Attempts at joining or opening a window while a scheduler takes it from under us.
WINDOW_ATTEMPTS = 5
# The actors of what flow control does by itself.
DEBOUNCE = "system:debounce"
SINGLETON = "system:singleton"


class _Taken(Exception):  # control flow: rolls the transaction back
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id


class Starts:
    """Debounced and singleton submissions, and a run started or cancelled inside a
    caller's transaction (schedules' too)."""

    def __init__(
        self, steps: Steps, webhooks: WebhookPolicy, book: PauseBook, *, limit_bytes: int
    ) -> None:
        self.steps = steps
        self.book = book
        self.store = steps.store
        self.registry = steps.registry
        self.webhooks = webhooks
        self.limit_bytes = limit_bytes

    # -- the moves, inside a caller's transaction ---------------------------------------

    def start_in(
        self,
        tx: Tx,
        definition: WorkflowDefinition,
        values: Mapping[str, Any],
        now: float,
        actor: str | None = None,
    ) -> tuple[str, Advanced | None]:
        """Insert the run ``values`` describes and write its first step, in ``tx``;
        publish with :meth:`after_commit` once it commits. A request id already taken
        answers with the run that took it (and None: nothing was written). A paused
        workflow's run is written held: its id, and None (nothing to publish; see
        docs/operations.md#pausing-starts-and-queues)."""
        if self.book.workflow_paused(values["namespace"], definition.name):
            held = hold_in(tx, values, definition.name, actor)
            if held is not None:
                return held, None
        if not tx.insert_run(values):
            request_id = values["request_id"]
            existing = tx.run_by_request(values["namespace"], request_id)
            if existing is None:
                raise StoreError(f"run id {values['id']} is taken")
            return existing.id, None
        row = tx.inserted_run(values["id"])
        state = RunState(row.id, definition.name, definition.version)
        started = RunStarted(at=now, input=values["input"], actor=actor)
        return row.id, self.steps.advance(tx, row, definition, state, started, last=False)

    def cancel_in(self, tx: Tx, run_id: str, reason: str, actor: str) -> Advanced | None:
        """Cancel ``run_id`` in ``tx``, if it has not ended (None if it has, or is gone)."""
        row, now = tx.lock_run(run_id)
        if row is None or row.status.terminal:
            return None
        definition = self.registry.get(row.workflow_ref, row.version, tx)
        state = restore(tx, row, definition)
        cancel = CancelRequested(at=now, reason=reason, actor=actor)
        log.info("run %s cancelled: %s", run_id, reason)
        return self.steps.advance(tx, row, definition, state, cancel, last=False)

    def after_commit(self, *advanced: Advanced | None) -> None:
        for step in advanced:
            if step is not None:
                self.steps.after_commit(step)

    # -- singleton -----------------------------------------------------------------------

    def submit_singleton(
        self,
        workflow: str,
        run_input: object,
        singleton: Singleton,
        *,
        namespace: str,
        request_id: str | None,
        version: int | None,
        webhook: str | None,
        priority: int = 0,
        actor: str | None = None,
    ) -> str:
        """Start a run unless the key's last run is unfinished: then ``skip`` returns that
        run, ``cancel`` cancels it and starts this one (in one transaction)."""
        webhook = self.webhooks.check(webhook, namespace)
        definition = self.registry.resolve_for(namespace, workflow, version)
        payload = check_input(definition, run_input, limit_bytes=self.limit_bytes)
        run_id = str(uuid.uuid4())
        stopped: Advanced | None = None
        try:
            with self.store.transaction() as tx:
                now = tx.now()
                if request_id is not None:
                    existing = tx.run_by_request(namespace, request_id)
                    if existing is not None:
                        return existing.id
                if not tx.claim_singleton(namespace, singleton.key, run_id):
                    holder_id = tx.lock_singleton(namespace, singleton.key)
                    holder = tx.run(holder_id) if holder_id is not None else None
                    if holder is not None and not holder.status.terminal:
                        if singleton.mode is SingletonMode.SKIP:
                            return holder.id
                        stopped = self.cancel_in(
                            tx,
                            holder.id,
                            f"singleton {singleton.key!r}: replaced by run {run_id}",
                            actor=actor or SINGLETON,
                        )
                    tx.hand_singleton(namespace, singleton.key, run_id)
                values = new_run(
                    run_id,
                    namespace,
                    definition,
                    payload,
                    request_id=request_id,
                    at=now,
                    webhook=webhook,
                    priority=priority,
                )
                started_id, started = self.start_in(tx, definition, values, now, actor)
                if started_id != run_id:  # a concurrent submit took the request id: its run
                    raise _Taken(started_id)
        except _Taken as taken:
            return taken.run_id
        self.after_commit(stopped, started)
        return run_id

    # -- debounce ------------------------------------------------------------------------

    def submit_debounced(
        self,
        workflow: str,
        run_input: object,
        debounce: Debounce,
        *,
        namespace: str,
        version: int | None,
        webhook: str | None,
        priority: int = 0,
        actor: str | None = None,
    ) -> str:
        """The key's pending run, given this input and started ``wait`` from now (never
        past its first submission plus ``max_wait``); a new pending run if the key has
        none. Nothing is dispatched here: the scheduler starts the run when it is due."""
        webhook = self.webhooks.check(webhook, namespace)
        definition = self.registry.resolve_for(namespace, workflow, version)
        payload = check_input(definition, run_input, limit_bytes=self.limit_bytes)
        for _attempt in range(WINDOW_ATTEMPTS):
            with self.store.transaction() as tx:
                now = tx.now()
                run_id = str(uuid.uuid4())
                window = _window(namespace, debounce, run_id, definition, now)
                values = new_run(
                    run_id,
                    namespace,
                    definition,
                    payload,
                    request_id=None,
                    at=now,
                    webhook=webhook,
                    priority=priority,
                )
                if tx.claim_debounce(window):
                    tx.insert_run(values)
                    log.info("run %s pending for debounce key %r (%s)", run_id, debounce.key, actor)
                    return run_id
                held = tx.lock_debounce(namespace, debounce.key)
                if held is None:  # started by a scheduler just now: open a new window
                    continue
                self._joinable(held, definition, version)
                if tx.set_pending_input(held.run_id, payload):
                    tx.extend_debounce(namespace, debounce.key, _put_off(held, debounce, now))
                    return held.run_id
                # Its run ended while pending (cancelled): this submission starts afresh.
                tx.reopen_debounce(window)
                tx.insert_run(values)
                return run_id
        raise StoreError(f"debounce key {debounce.key!r} kept changing hands; try again")

    @staticmethod
    def _joinable(
        held: DebounceRecord, definition: WorkflowDefinition, version: int | None
    ) -> None:
        if held.workflow != definition.qualified or (
            version is not None and version != held.version
        ):
            raise FlowConflict(
                f"debounce key {held.key!r} holds pending run {held.run_id} of "
                f"{held.workflow}@{held.version}; a submission of {definition.key} cannot "
                "join it (use another key)"
            )

    def _hold_debounced(self, tx: Tx, namespace: str, run_id: str, workflow: str) -> bool:
        """A debounced run whose window closed while its workflow is paused: held, to
        start when the pause is lifted."""
        paused = self.book.workflow_paused(namespace, workflow)
        if not paused or not tx.pause_holding(namespace, PauseKind.WORKFLOW, workflow):
            return False
        tx.hold_start(HeldStart(run_id, namespace, workflow, DEBOUNCE))
        return True

    def start_due(self, due: Sequence[DebounceRecord], now: float) -> int:
        """Start the pending runs of the debounce windows ``due`` (read as due by ``now``,
        the database's clock); each window is taken in the transaction that starts its
        run, and one another scheduler holds is left to it. Returns how many started."""
        started = 0
        for window in due:
            advanced = None
            with self.store.transaction() as tx:
                held = tx.lock_debounce(window.namespace, window.key, due_by=now)
                if held is None or held.run_id != window.run_id:
                    continue
                tx.delete_debounce(window.namespace, window.key)
                row, at = tx.lock_run(held.run_id)
                if row is None or row.status is not RunStatus.PENDING or row.last_seq != 0:
                    continue  # cancelled while pending: nothing to start
                if self._hold_debounced(tx, row.namespace, row.id, row.workflow):
                    continue
                definition = self.registry.get(row.workflow_ref, row.version, tx)
                state = RunState(row.id, definition.name, definition.version)
                # Its submitters were many: the window started it, when it closed.
                event = RunStarted(at=at, input=row.input, actor=DEBOUNCE)
                advanced = self.steps.advance(tx, row, definition, state, event, last=False)
            log.info(
                "run %s started after debounce key %r (%d submissions)",
                held.run_id,
                held.key,
                held.submissions,
            )
            self.after_commit(advanced)
            started += 1
        return started


def _window(
    namespace: str, debounce: Debounce, run_id: str, definition: WorkflowDefinition, now: float
) -> dict[str, Any]:
    """The row of a debounce window its first submission opens, for its pending run."""
    deadline = None if debounce.max_wait_s is None else now + debounce.max_wait_s
    return {
        "namespace": namespace,
        "key": debounce.key,
        "run_id": run_id,
        "workflow": definition.qualified,  # acme/checkout: one definition
        "version": definition.version,
        "first_at": now,
        "due_at": now + debounce.wait_s,
        "deadline_at": deadline,
    }


def _put_off(held: DebounceRecord, debounce: Debounce, now: float) -> float:
    """When a joined window is due now: its wait from this submission, never past its
    deadline."""
    due = now + debounce.wait_s
    if held.deadline_at is not None:
        due = min(due, held.deadline_at)
    return due
