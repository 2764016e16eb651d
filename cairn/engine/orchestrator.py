"""The orchestrator: the engine's one face to workers, the scheduler, the API and the CLI.

It wires the engine's parts together and hands out their methods — submitting
(:mod:`~cairn.engine.submit`, with debounce and singleton in :mod:`~cairn.engine.starts` and
schedules in :mod:`~cairn.engine.schedules`), advancing (:mod:`~cairn.engine.advance`),
requests from outside (:mod:`~cairn.engine.requests`), migrations between versions
(:mod:`~cairn.engine.migrations`), reading
(:mod:`~cairn.engine.reads`) — over one store, one publisher and one registry of
definitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cairn.config import Settings
from cairn.engine.advance import Steps
from cairn.engine.builds import BuildBook, RoutingPublisher
from cairn.engine.executions import Executions
from cairn.engine.grouping import Grouping
from cairn.engine.hooks import AfterCommit
from cairn.engine.migrations import Migrations
from cairn.engine.notices import WebhookPolicy
from cairn.engine.outbox import Outbox, Publisher
from cairn.engine.pauses import PauseBook, Pauses
from cairn.engine.plan import Planner
from cairn.engine.reads import Reads
from cairn.engine.registry import Registry
from cairn.engine.requests import Requests
from cairn.engine.schedules import Schedules
from cairn.engine.submit import Submissions
from cairn.model.messages import NodeMessage
from cairn.store.sql import Store


class Orchestrator:
    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        settings: Settings,
        registry: Registry | None = None,
    ) -> None:
        self.store, self.settings = store, settings
        self.registry = registry or Registry(
            store, queues=settings.queues, default_queue=settings.queue
        )
        # Called with each decision once it is committed (never for one rolled back): the
        # composition root registers what the world hears of it (anomaly alerts, counts).
        self.after_commit: list[AfterCommit] = []
        # What is paused, as this process sees it (cairn.engine.pauses).
        self.pause_book = PauseBook(store, settings.queue)
        self.builds = BuildBook(store, self.registry, settings)  # where routed nodes go
        self.outbox = self._outbox(publisher)
        self.webhooks = WebhookPolicy(settings)
        limit = settings.max_payload_bytes
        self.reads = reads = Reads(store, self.registry, self.builds.waiting_for)
        self.steps = steps = Steps(Planner(settings), self.outbox, reads, self.after_commit)
        self.executions = Executions(store, self.registry, steps.heads)  # the worker's door
        submissions = Submissions(steps, self.webhooks, self.pause_book, limit_bytes=limit)
        requests = Requests(steps, reads, limit_bytes=limit)

        self.submit = submissions.submit
        self.submit_batch = submissions.submit_batch
        self.fork = submissions.fork
        self.check_input = submissions.check_input
        # Schedules (kept, ticked, backfilled) and debounced runs due to start.
        self.schedules = Schedules(submissions)
        self.start_debounced = submissions.starts.start_due
        # Pausing a workflow's new starts or a queue, and resuming them.
        self.pauses = Pauses(steps, self.pause_book)

        self.apply = steps.apply
        self.complete = steps.complete
        self.complete_fused = steps.complete_fused
        self.deliver = steps.deliver
        self.record = steps.record
        self.record_recovery = steps.record_recovery

        migrations = Migrations(steps)  # runs moved between versions, and a move undone
        self.migrate_runs = migrations.migrate
        self.rollback_migration = migrations.rollback

        self.signal = requests.signal
        self.cancel = requests.cancel
        self.rollback = requests.rollback
        self.rollback_plan = requests.rollback_plan
        self.load = reads.load
        self.get_run = reads.get_run
        self.waiting = reads.waiting
        self.events = reads.events
        self.checkpoint = reads.checkpoint
        self.fenced_out = reads.fenced_out
        self.stop_requested = reads.stop_requested

        self.flush_sent = self.outbox.flush

    @property
    def publisher(self) -> Publisher:
        return self.outbox.publisher

    @publisher.setter
    def publisher(self, publisher: Publisher) -> None:
        self.outbox.publisher = self._routed(publisher)

    def _outbox(self, publisher: Publisher) -> Outbox:
        """The outbox: its publishes routed to builds, held while their queue is paused,
        and — with a broker, whose consumer each message costs — a fork's branches
        grouped (cairn.engine.grouping); the embedded default's has no such cost."""
        settings = self.settings
        grouping: Callable[[Sequence[NodeMessage]], list[NodeMessage]] = list
        if settings.broker_url is not None:
            grouping = Grouping(
                settings.branches_per_message,
                self.registry.get,
                namespace_limits=bool(settings.namespace_concurrency),
            )
        return Outbox(self.store, self._routed(publisher), self.pause_book.holds, grouping)

    def _routed(self, publisher: Publisher) -> Publisher:
        """A broker's publisher routes node messages to builds (docs/versions.md). The
        embedded default has one process, of one build, and SQLite one writer: its relay
        publishes in a transaction a routing read would wait for."""
        if self.settings.broker_url is None or isinstance(publisher, RoutingPublisher):
            return publisher
        return RoutingPublisher(publisher, self.builds)
