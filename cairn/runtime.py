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
from dataclasses import dataclass, field
from typing import Any

from cairn import faults
from cairn.config import Settings
from cairn.effects.adapters import load_adapters
from cairn.lease.leases import Leases, MemoryLeases, RedisLeases
from cairn.orchestrator.catalog import discover
from cairn.orchestrator.engine import Orchestrator, Publisher
from cairn.orchestrator.scheduler import Scheduler
from cairn.sentry import init_sentry
from cairn.store.database import make_engine, upgrade
from cairn.store.repository import Store
from cairn.workers.cache import MemoryResultCache, RedisResultCache, ResultCache
from cairn.workers.inprocess import InProcessBroker
from cairn.workers.runner import NodeRunner

log = logging.getLogger(__name__)

# The embedded relay may republish sooner: no other process publishes for it.
EMBEDDED_RELAY_AFTER_S = 0.5


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
    _stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        celery_app: Any = None,
        worker: str | None = None,
        concurrency: int = 2,
        migrate: bool | None = None,
    ) -> Runtime:
        faults.arm(settings.fault_points)
        load_adapters(settings.effect_adapters)
        init_sentry(settings)
        engine = make_engine(settings.effective_database_url)
        if migrate if migrate is not None else settings.database_url is None:
            upgrade(engine)  # the embedded database migrates itself; servers use `cairn db`
        store = Store(engine)
        publisher: Publisher
        broker = None
        if settings.broker_url is not None:
            from cairn.workers.app import CeleryPublisher, make_celery  # noqa: PLC0415

            publisher = CeleryPublisher(
                celery_app or make_celery(settings),
                settings.queue,
                copies=2 if settings.duplicate_deliveries else 1,
            )
        else:
            broker = InProcessBroker(concurrency)
            publisher = broker
        leases: Leases = (
            RedisLeases.from_url(settings.redis_url) if settings.redis_url else MemoryLeases()
        )
        orchestrator = Orchestrator(store, publisher, settings)
        cache: ResultCache = (
            RedisResultCache.from_url(settings.redis_url)
            if settings.redis_url
            else MemoryResultCache()
        )
        runner = NodeRunner(
            orchestrator,
            leases,
            settings,
            worker or f"{socket.gethostname()}:{os.getpid()}",
            cache=cache,
        )
        relay_after = EMBEDDED_RELAY_AFTER_S if broker is not None else None
        scheduler = Scheduler(orchestrator, leases, settings, relay_after=relay_after)
        runtime = cls(settings, store, orchestrator, leases, runner, scheduler, broker)
        runtime.register_configured()
        return runtime

    def register_configured(self) -> None:
        """Register every definition named by ``CAIRN_WORKFLOWS``; refuse invalid ones."""
        if not self.settings.workflows:
            return
        for found in discover(self.settings.workflows):
            if found.error is not None:
                raise found.error
            assert found.definition is not None
            self.orchestrator.registry.register(found.definition)

    def start_workers(self) -> None:
        """Embedded mode: execute node messages on this process's threads."""
        if self.broker is None:
            raise RuntimeError(
                "workers run in-process only without CAIRN_BROKER_URL; "
                "start `cairn worker` processes instead"
            )
        self.broker.start(self.runner.run)

    def start_scheduler(self) -> None:
        thread = threading.Thread(
            target=self.scheduler.run_forever,
            args=(self._stop,),
            name="cairn-scheduler",
            daemon=True,
        )
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.broker is not None:
            self.broker.stop()
        try:
            self.orchestrator.flush_sent()
        except Exception:
            log.warning(
                "could not mark published messages sent; the relay will resend them", exc_info=True
            )
        self.store.dispose()
