"""Publish after commit: node messages are rows of the step's transaction (the outbox),
handed to the broker only once it commits. A publish that fails, or a process that dies
before it, leaves them to the scheduler's relay. Persist first, then publish — never the
other way round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from cairn.faults import fault_point
from cairn.model.messages import NodeMessage
from cairn.store.sql import Store

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """The broker port: the in-process broker (:mod:`cairn.workers.inprocess`) and Celery
    (:class:`cairn.workers.app.CeleryPublisher`). One contract suite holds them to what
    the engine relies on (:class:`cairn.testing.publisher_contract.PublisherContract`)."""

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        """Hand messages to the broker, each to its own queue (``NodeMessage.queue``, or
        the default one); False if they were not taken (left to the relay)."""
        ...

    def backlog(self, queue: str | None = None) -> int | None:
        """Node messages waiting in ``queue`` (None: the default queue) for a worker;
        None if the broker cannot say (recovery then assumes none). A broker with one
        queue for everything may answer for all of them."""
        ...


class RelayOnly:
    """A publisher that takes nothing: every message stays in the outbox for the
    scheduler's relay. For a process that writes without a broker of its own (a worker
    registering its definitions before it forks, a deploy job)."""

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        return False

    def backlog(self, queue: str | None = None) -> int | None:
        return None


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


class Outbox:
    """The committed messages' way to the broker, and the marks of those it took."""

    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        held: Callable[[NodeMessage], bool] = lambda _message: False,
        grouping: Callable[[Sequence[NodeMessage]], list[NodeMessage]] = list,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.held = held
        # A fork's branches as fewer messages than branches (cairn.engine.grouping).
        self.grouping = grouping
        self.sent = SentMarks()

    def publish(self, messages: Sequence[NodeMessage], *, group: bool = True) -> None:
        """Publish messages whose rows are committed; a failure is the relay's to mend.
        A message bound for a paused queue stays in the outbox, for the relay to publish
        once the queue resumes. A fork's branches may go grouped (``group``), a lead
        carrying its siblings; their rows stay unsent until each sibling's own commit
        marks its own — or they are spilled, each published on its own (not ``group``)."""
        held = [m for m in messages if self.held(m)]
        if held:
            self._keep(held)
            messages = [m for m in messages if m not in held]
        if not messages:
            return
        if group:
            messages = self.grouping(messages)
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

    def _keep(self, held: Sequence[NodeMessage]) -> None:
        """Held messages with a row stay unsent in it; those without one (a recovery's,
        a slot's release) get one, so the relay has them when the queue resumes."""
        rowless = [m for m in held if m.outbox_id is None]
        if rowless:
            with self.store.transaction() as tx:
                for message in rowless:
                    tx.return_to_outbox(message.run_id, message.to_dict())
        log.info("%d message(s) held in the outbox: their queue is paused", len(held))

    def hold(self, message: NodeMessage) -> None:
        """A message a worker received for a paused queue, back in the outbox unsent (a
        row of its own): the relay publishes it once the queue resumes."""
        payload = replace(message, outbox_id=None).to_dict()
        with self.store.transaction() as tx:
            tx.return_to_outbox(message.run_id, payload)

    def flush(self) -> None:
        """Write the marks that found no transaction to ride along with."""
        ids = self.sent.drain()
        if ids:
            with self.store.transaction() as tx:
                tx.mark_sent(ids)


def with_outbox_ids(
    dispatches: Sequence[NodeMessage], ids: Mapping[tuple[str, int, str], int]
) -> list[NodeMessage]:
    """The dispatches with the ids of the outbox rows the step wrote for them."""
    return [replace(m, outbox_id=ids[(m.node, m.iteration, m.phase.value)]) for m in dispatches]
