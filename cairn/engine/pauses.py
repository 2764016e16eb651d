"""Pausing a workflow's new starts, or a queue, in one namespace (docs/operations.md).

Every process keeps a view of what is paused (:class:`PauseBook`), read from the
database at most once a :data:`VIEW_TTL`: the submit path, the publisher and the workers
ask it without a round trip, and a pause returns only once that long has passed, so from
then on every process knows. Where a start is held, the submission re-reads the pause
with its row locked (:meth:`~cairn.store.pauses.PausesTx.pause_holding`) in the
transaction that writes the held start; lifting the pause deletes that row, then starts
what it held — each run as its own submitter, in submission order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from logging import WARNING
from typing import Any

from cairn.engine.advance import Advanced, Steps
from cairn.errors import InvalidInput, NotPaused, StoreError
from cairn.model.events import RunStarted
from cairn.model.messages import NodeMessage
from cairn.model.pauses import MAX_REASON, HeldStart, Pause, PauseKind
from cairn.model.queues import queue_name_problem
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.model.workflow_names import DEFAULT_NAMESPACE
from cairn.repeats import Repeats
from cairn.store.messages import HeldQueues
from cairn.store.sql import Store, Tx

log = logging.getLogger(__name__)

# How stale a process's view of the pauses may be; a pause waits this long to return.
VIEW_TTL = 1.0
# Held starts started per transaction when a pause is lifted.
START_BATCH = 100


@dataclass(frozen=True)
class _View:
    workflows: frozenset[tuple[str, str]] = frozenset()
    queues: frozenset[tuple[str, str]] = frozenset()


class PauseBook:
    """This process's view of the pauses, refreshed when older than ``ttl``."""

    def __init__(self, store: Store, default_queue: str, ttl: float = VIEW_TTL) -> None:
        self.store = store
        self.default_queue = default_queue
        self.ttl = ttl
        self._view = _View()
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._repeats = Repeats(log)

    def workflow_paused(self, namespace: str, workflow: str) -> bool:
        return (namespace, workflow) in self._current().workflows

    def holds(self, message: NodeMessage) -> bool:
        """Whether ``message`` is bound for a queue its run's namespace paused."""
        queues = self._current().queues
        if not queues:
            return False
        namespace = message.namespace or DEFAULT_NAMESPACE
        return (namespace, message.queue or self.default_queue) in queues

    def held_queues(self) -> HeldQueues:
        return HeldQueues(self._current().queues, self.default_queue)

    def forget(self) -> None:
        """Read again at the next question (this process changed a pause)."""
        with self._lock:
            self._read_at = float("-inf")

    def _current(self) -> _View:
        if time.monotonic() - self._read_at < self.ttl:
            return self._view
        with self._lock:
            if time.monotonic() - self._read_at >= self.ttl:
                self._refresh()
            return self._view

    def _refresh(self) -> None:
        try:
            with self.store.reading() as tx:
                found = tx.list_pauses()
        except Exception as error:  # an outage: keep the last view, ask again after the ttl
            self._repeats.failed(
                "read", "reading the pauses failed; keeping the last view", error, level=WARNING
            )
        else:
            self._repeats.recovered("read", "reading the pauses works again")
            self._view = _View(
                frozenset((p.namespace, p.name) for p in found if p.kind is PauseKind.WORKFLOW),
                frozenset((p.namespace, p.name) for p in found if p.kind is PauseKind.QUEUE),
            )
        self._read_at = time.monotonic()


def hold_in(tx: Tx, values: Mapping[str, Any], workflow: str, actor: str | None) -> str | None:
    """If ``workflow`` is paused in the run's namespace, write the run ``values`` describe
    ``pending``, held, in ``tx`` and return its id (or the id of the run that holds its
    request id); None if it is not paused, and nothing is written."""
    namespace = values["namespace"]
    if not tx.pause_holding(namespace, PauseKind.WORKFLOW, workflow):
        return None
    if not tx.insert_run(values):  # its request id is taken: the run that took it
        existing = tx.run_by_request(namespace, values["request_id"])
        if existing is None:
            raise StoreError(f"run id {values['id']} is taken")
        return existing.id
    tx.hold_start(HeldStart(values["id"], namespace, workflow, actor))
    log.info("run %s of %s held: the workflow is paused in %s", values["id"], workflow, namespace)
    return str(values["id"])


class Pauses:
    """Pausing and resuming, and starting what a lifted pause held."""

    def __init__(self, steps: Steps, book: PauseBook) -> None:
        self.steps = steps
        self.store = steps.store
        self.book = book

    def pause(self, namespace: str, kind: PauseKind, name: str, *, reason: str, actor: str) -> bool:
        """Pause it; False if it was paused already (the first pause stands). Returns
        once every process's view includes it."""
        self._check(namespace, kind, name, reason)
        pause = Pause(namespace, kind, name, reason, actor, 0.0)
        with self.store.transaction() as tx:
            added = tx.add_pause(pause)
        if added:
            log.info("%s %s paused in %s by %s: %s", kind.value, name, namespace, actor, reason)
            self.book.forget()
            time.sleep(self.book.ttl)
        return added

    def resume(self, namespace: str, kind: PauseKind, name: str, *, actor: str) -> int:
        """Lift the pause and start what it held; returns how many runs started."""
        with self.store.transaction() as tx:
            if not tx.remove_pause(namespace, kind, name):
                raise NotPaused(f"{kind.value} {name} is not paused in namespace {namespace}")
        self.book.forget()
        log.info("%s %s resumed in %s by %s", kind.value, name, namespace, actor)
        if kind is not PauseKind.WORKFLOW:
            return 0  # the relay publishes the queue's messages
        return self._start_all(lambda tx: tx.take_held_starts(START_BATCH, namespace, name))

    def list(self, namespace: str | None = None) -> list[Pause]:
        with self.store.reading() as tx:
            return tx.list_pauses(namespace)

    def start_orphans(self) -> int:
        """Start held runs whose pause is gone: a resume that died before it started them
        all (the scheduler calls this)."""
        with self.store.reading() as tx:  # an idle pass costs no commit
            if not tx.has_orphaned_starts():
                return 0
        return self._start_all(lambda tx: tx.take_orphaned_starts(START_BATCH))

    def _start_all(self, take: Any) -> int:
        started = 0
        while True:
            advanced: list[Advanced] = []
            with self.store.transaction() as tx:
                held = take(tx)
                advanced = [a for a in (self._start_in(tx, h) for h in held) if a is not None]
            for step in advanced:
                self.steps.after_commit(step)
            started += len(advanced)
            if len(held) < START_BATCH:
                return started

    def _start_in(self, tx: Tx, held: HeldStart) -> Advanced | None:
        row, at = tx.lock_run(held.run_id)
        if row is None or row.status is not RunStatus.PENDING or row.last_seq != 0:
            return None  # cancelled while held: nothing to start
        definition = self.steps.registry.get(row.workflow_ref, row.version, tx)
        state = RunState(row.id, definition.name, definition.version)
        started = RunStarted(at=at, input=row.input, actor=held.actor)
        return self.steps.advance(tx, row, definition, state, started, last=False)

    def _check(self, namespace: str, kind: PauseKind, name: str, reason: str) -> None:
        if not reason.strip():
            raise InvalidInput("a pause needs a reason: the people it holds up will read it")
        if len(reason) > MAX_REASON:
            raise InvalidInput(f"a pause's reason is at most {MAX_REASON} characters")
        if kind is PauseKind.QUEUE:
            problem = queue_name_problem(name)
            if problem is not None:
                raise InvalidInput(problem)
        else:  # UnknownWorkflow if the namespace has no such workflow, nor one shared
            self.steps.registry.visible(namespace, name)
