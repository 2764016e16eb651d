"""Assembling cairn's parts from one Settings object.

With ``CAIRN_DATABASE_URL``/``CAIRN_BROKER_URL``/``CAIRN_REDIS_URL`` unset this is the
embedded default: SQLite under ``CAIRN_HOME``, nodes run on threads of this process,
leases in memory. With them set, the same parts talk to PostgreSQL, Celery and Redis.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.config import Settings
from cairn.definitions.catalog import load_all
from cairn.effects.adapters import load_adapters
from cairn.engine.builds import Announcer, build_of, workflow_keys
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.outbox import RelayOnly
from cairn.engine.recovery import RecoveryPolicy
from cairn.engine.registry import Registry
from cairn.lease.port import Leases
from cairn.limits.circuits import Circuits
from cairn.limits.concurrency import Slots
from cairn.limits.rates import Rates
from cairn.model.definition import WorkflowDefinition
from cairn.observe.sentry import init_sentry
from cairn.parts import Migrate, Parts, celery_publisher
from cairn.scheduler.notifier import Notifier
from cairn.scheduler.process import Scheduler
from cairn.store.backends import store_for
from cairn.store.database import make_engine, require_schema
from cairn.store.sql import Store
from cairn.workers.cache import MemoryResultCache, RedisResultCache, ResultCache
from cairn.workers.circuit_watch import CircuitWatch
from cairn.workers.inprocess import InProcessBroker
from cairn.workers.ports import StepParts
from cairn.workers.runner import NodeRunner

log = logging.getLogger(__name__)

# The embedded relay may republish sooner: no other process publishes for it.
EMBEDDED_RELAY_AFTER_S = 0.5
DEFAULT_POOL_SIZE = 5
# Threads of an embedded process that use the database besides its workers: the
# scheduler, the notifier, and a request or two of the API's.
EMBEDDED_OTHER_THREADS = 4


@dataclass
class Runtime:
    settings: Settings
    store: Store
    orchestrator: Orchestrator
    leases: Leases
    runner: NodeRunner
    scheduler: Scheduler
    broker: InProcessBroker | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    # The definitions of CAIRN_WORKFLOWS this process registered, and its announcement
    # of its build (an embedded worker's: see start_workers).
    registered: list[WorkflowDefinition] = field(default_factory=list)
    _announcer: Announcer | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _notifier: Notifier | None = None

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        celery_app: Any = None,
        worker: str | None = None,
        concurrency: int | None = None,
        migrate: Migrate = None,
        register: bool = True,
        pre_ping: bool = False,
        resolve: bool = True,
    ) -> Runtime:
        """Every part, from ``settings``. ``register``: register the definitions of
        CAIRN_WORKFLOWS (a Celery worker's children leave it to their parent, which did
        so once before forking them). ``pre_ping``: the database pool tests connections
        as it hands them out (see :func:`~cairn.store.database.make_engine`).
        ``resolve`` False: a registered definition's handlers are imported when first
        called, not when it is loaded — for the processes that start and answer runs
        (the scheduler, the API, a client) and need not have the handlers' code.
        ``concurrency``: the embedded worker threads (default CAIRN_WORKER_THREADS).
        ``migrate``: see :meth:`Parts.build`; an embedded runtime (no broker) migrates
        its database when its schema is behind, SQLite or PostgreSQL."""
        load_adapters(settings.effect_adapters)
        init_sentry(settings)
        broker = (
            None
            if settings.broker_url is not None
            else InProcessBroker(concurrency or settings.worker_threads)
        )
        publisher = broker or celery_publisher(settings, celery_app)
        if migrate is None and broker is not None:
            # Embedded mode on PostgreSQL has no `cairn db upgrade` step: it migrates as
            # the embedded SQLite file does (only when behind: one query otherwise).
            migrate = "if_behind"
        parts = Parts.build(
            settings,
            publisher,
            migrate=migrate,
            pre_ping=pre_ping,
            resolve=resolve,
            pool_size=_pool_size(broker),
        )
        store, orchestrator, leases = parts.store, parts.orchestrator, parts.leases
        name = worker or f"{socket.gethostname()}:{os.getpid()}"
        runner = _runner(parts, name, continues=settings.continue_steps)
        relay_after = EMBEDDED_RELAY_AFTER_S if broker is not None else None
        scheduler = Scheduler(
            orchestrator, leases, settings, relay_after=relay_after, gate=parts.gate
        )
        runtime = cls(settings, store, orchestrator, leases, runner, scheduler, broker)
        if register:
            try:
                runtime.register_configured()
            except BaseException:
                store.dispose()
                raise
        return runtime

    def register_configured(self) -> None:
        """Register every definition named by ``CAIRN_WORKFLOWS``, and the schedules they
        declare; refuse invalid ones."""
        self.registered = _register(self.orchestrator, self.settings)

    @property
    def slots(self) -> Slots | None:
        """The concurrency slots (Redis's, or this process's memory)."""
        return self.runner.gate.slots if self.runner.gate is not None else None

    @property
    def circuits(self) -> Circuits | None:
        """The dependencies' circuits (Redis's, or this process's memory)."""
        return self.runner.circuits.circuits if self.runner.circuits is not None else None

    @property
    def rates(self) -> Rates | None:
        """The rate buckets (Redis's, or this process's memory)."""
        return self.runner.rates

    def start_workers(self) -> None:
        """Embedded mode: execute node messages on this process's threads."""
        if self.broker is None:
            raise RuntimeError(
                "workers run in-process only without CAIRN_BROKER_URL; "
                "start `cairn worker` processes instead"
            )
        build = build_of(self.settings, self.registered)
        self.runner.build = build
        self._announcer = Announcer(
            self.store, self.settings, build, workflow_keys(self.registered)
        ).start()
        self.orchestrator.steps.starts_leave_heads = True
        self.broker.start(self.runner.run)

    def start_scheduler(self) -> None:
        """The scheduler's passes, and beside them the webhook notifier: a receiver that
        answers slowly must not make timers late."""
        self._notifier = Notifier(
            self.store,
            self.settings,
            self.orchestrator.webhooks.secrets,
            metrics=self.scheduler.metrics,
        )
        for target, name in (
            (self.scheduler.run_forever, "cairn-scheduler"),
            (self._notifier.run_forever, "cairn-notifier"),
        ):
            thread = threading.Thread(target=target, args=(self._stop,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        self._stop.set()
        if self._announcer is not None:
            self._announcer.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._notifier is not None:
            self._notifier.close()
        if self.broker is not None:
            self.broker.stop()
        try:
            self.orchestrator.flush_sent()
        except Exception:
            log.warning(
                "could not mark published messages sent; the relay will resend them", exc_info=True
            )
        self.store.dispose()


def _pool_size(broker: InProcessBroker | None) -> int:
    """Database connections to keep: embedded, one for each worker thread and the
    scheduler's, the notifier's and the API's beside them — a connection opened and
    closed for want of a pooled one costs a PostgreSQL process, or SQLite's file
    opened again."""
    if broker is None:
        return DEFAULT_POOL_SIZE
    return max(DEFAULT_POOL_SIZE, broker.concurrency + EMBEDDED_OTHER_THREADS)


def worker_runtime(app: Any) -> Runtime:
    """The runtime of one Celery worker process, built after the fork."""
    runtime = Runtime.build(
        app.cairn_settings,
        celery_app=app,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        register=False,  # `cairn worker` did, once, before the fork
    )
    # a run submitted by a message may have its first node delivered to this process
    runtime.orchestrator.steps.starts_leave_heads = True
    return runtime


def worker_app(settings: Settings) -> Any:
    """The Celery app of ``cairn worker``: one that runs nodes."""
    from cairn.workers.app import make_celery  # noqa: PLC0415 - Celery, for workers only

    return make_celery(settings, worker_runtime)


_default_app: Any = None


def __getattr__(name: str) -> Any:
    """``celery -A cairn.runtime`` (Flower, or a worker started by Celery's own command)
    finds the app here, built from ``CAIRN_*`` on first access rather than at import."""
    global _default_app  # noqa: PLW0603 - the lazily built app for `celery -A`
    if name == "app":
        if _default_app is None:
            _default_app = worker_app(Settings.from_env())
        return _default_app
    raise AttributeError(name)


def _runner(parts: Parts, worker: str, *, continues: bool) -> NodeRunner:
    """The node runner on ``parts``, named ``worker``; ``continues``: it runs a committed
    step's successor itself (see cairn.workers.step.continuation)."""
    settings, orchestrator, leases = parts.settings, parts.orchestrator, parts.leases
    cache: ResultCache = (
        RedisResultCache.from_url(settings.redis_url) if settings.redis_url else MemoryResultCache()
    )
    return NodeRunner(
        step_parts(orchestrator),
        leases,
        settings,
        worker,
        cache=cache,
        gate=parts.gate,
        circuits=CircuitWatch(parts.circuits, orchestrator.record, count=leases.count),
        rates=parts.rates,
        continues=continues,
        spill_after=settings.branch_spill_after,
    )


def step_parts(orchestrator: Orchestrator) -> StepParts:
    """The parts of ``orchestrator`` a worker's steps use, and nothing else of it: the
    worker is handed these, never the orchestrator to reach through."""
    return StepParts(
        executions=orchestrator.executions,
        steps=orchestrator.steps,
        reads=orchestrator.reads,
        pauses=orchestrator.pause_book,
        outbox=orchestrator.outbox,
        recovery=RecoveryPolicy(orchestrator.steps, orchestrator.settings),
    )


def register_definitions(settings: Settings) -> list[WorkflowDefinition]:
    """Register the definitions of CAIRN_WORKFLOWS and their schedules, and let go of the
    database: what a Celery worker does once before forking its children, so that no
    child spends its first task on it. The definitions as registered."""
    engine = make_engine(settings.effective_database_url)
    try:
        require_schema(engine)
        store = store_for(engine)
        registry = Registry(store, queues=settings.queues, default_queue=settings.queue)
        return _register(Orchestrator(store, RelayOnly(), settings, registry), settings)
    finally:
        engine.dispose()


def announce_build(settings: Settings, definitions: Sequence[WorkflowDefinition]) -> Announcer:
    """A Celery worker's parent announcing its build (:func:`build_of` the definitions),
    every CAIRN_BUILD_ANNOUNCE_S, on a thread. Each announcement lets go of its
    connection: the parent forks its pool's children meanwhile, and a child must not
    inherit a connection the parent still uses."""
    engine = make_engine(settings.effective_database_url, pool_size=1)
    announcer = Announcer(
        store_for(engine), settings, build_of(settings, definitions), workflow_keys(definitions)
    )
    announcer.after_each = engine.dispose
    return announcer.start()


def _register(orchestrator: Orchestrator, settings: Settings) -> list[WorkflowDefinition]:
    """Register every definition found into CAIRN_WORKFLOWS_NAMESPACE, or none: a process
    that starts must not run with half its workflows, and its operator sees every fault
    of every file at once. Then add, or bring up to date, the schedules they declare: a
    deployment's schedules come with its code, and one an operator paused stays paused."""
    workflows, namespace = settings.workflows, settings.workflows_namespace
    found = load_all(workflows) if workflows else []
    registered = orchestrator.registry.register_all(found, namespace)
    for definition in registered:
        orchestrator.schedules.declare(namespace, definition)
    return registered
