"""What a command that reads runs or answers them talks to: the deployment's store,
orchestrator and leases (:class:`~cairn.parts.Parts`), and nothing that runs nodes.

Unlike :class:`cairn.client.Client` (a full :class:`~cairn.runtime.Runtime`), it loads
registered definitions without importing their handlers, registers nothing, and builds
no broker connection up front: what a signal or a cancel dispatches is committed to the
outbox with the step, held while the command prints its answer, and only then handed
to Celery (imported then, if at all). A command that dies before that leaves the
messages to the scheduler's relay, as any crash after a commit does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.access.local import LocalWrites
    from cairn.config import Settings
    from cairn.engine.orchestrator import Orchestrator
    from cairn.lease.port import Leases
    from cairn.model.messages import NodeMessage
    from cairn.store.sql import Store
    from cairn.timetravel.timeline import Timeline

log = logging.getLogger(__name__)


class HeldMessages:
    """A publisher that takes nothing yet: it keeps the committed messages, unmarked,
    until :meth:`Deployment.close` hands them on."""

    def __init__(self) -> None:
        self.messages: list[NodeMessage] = []

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        self.messages.extend(messages)
        return False  # not taken: until they are, the relay may publish them

    def backlog(self, queue: str | None = None) -> int | None:
        return None


class Deployment:
    def __init__(self, settings: Settings | None = None) -> None:
        # Imported here, not with the module: every command module imports this one,
        # and `cairn --help` imports them all.
        from cairn.config import Settings
        from cairn.parts import Parts

        self.settings = settings or Settings.from_env()
        self._held = HeldMessages()
        self.parts = Parts.build(self.settings, self._held, pre_ping=True, resolve=False)

    @property
    def store(self) -> Store:
        return self.parts.store

    @property
    def orchestrator(self) -> Orchestrator:
        return self.parts.orchestrator

    @property
    def leases(self) -> Leases:
        return self.parts.leases

    @property
    def writes(self) -> LocalWrites:
        """This command's principal (``db:<user>``): what it writes, audited."""
        from cairn.access.local import LocalWrites

        return LocalWrites(self.store)

    def timeline(self, run_id: str) -> Timeline:
        from cairn.timetravel.timeline import Timeline

        return Timeline(self.orchestrator, run_id)

    def close(self) -> None:
        """Hand what the command committed to the broker, then let go of the database."""
        try:
            self._publish_held()
        finally:
            self.store.dispose()

    def _publish_held(self) -> None:
        held, self._held.messages = self._held.messages, []
        # Embedded (no broker), the worker process's relay publishes them: this
        # process's own in-memory broker has no worker to hand them to.
        if not held or self.settings.broker_url is None:
            return
        from cairn.parts import celery_publisher

        self.orchestrator.publisher = celery_publisher(self.settings)  # routed to builds
        outbox = self.orchestrator.outbox
        outbox.publish(held)
        try:
            outbox.flush()
        except Exception:  # published: a lost mark only means the relay sends them again
            log.warning("could not mark published messages sent", exc_info=True)


@contextmanager
def deployment() -> Iterator[Deployment]:
    """A :class:`Deployment` for one command, closed (its messages published) after."""
    opened = Deployment()
    try:
        yield opened
    finally:
        opened.close()
