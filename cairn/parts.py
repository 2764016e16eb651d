"""What every process that moves runs shares, assembled from one Settings object: the
store, the leases and what lives beside them in Redis (slots, circuits, rates), and the
orchestrator with its after-commit hooks — and nothing that executes nodes.

:class:`~cairn.runtime.Runtime` adds the node runner, the scheduler and the broker; the
command line's commands that read or answer runs use these parts alone, so that they
import no worker, no scheduler and no Celery (see :mod:`cairn.cli.deployment`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from cairn import clock, faults
from cairn.config import Settings
from cairn.engine.circuits import Circuits
from cairn.engine.hooks import stopped_leases
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.outbox import Publisher
from cairn.engine.rates import Rates
from cairn.engine.registry import Registry
from cairn.engine.slots import SlotGate, Slots
from cairn.lease.circuits import MemoryCircuits, RedisCircuits
from cairn.lease.memory import MemoryLeases
from cairn.lease.port import Leases
from cairn.lease.rates import MemoryRates, RedisRates
from cairn.lease.redis import RedisLeases
from cairn.lease.redis_slots import RedisSlots
from cairn.lease.slots import MemorySlots
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.sql import Store

if TYPE_CHECKING:
    from cairn.decider import Decision


@dataclass
class Parts:
    settings: Settings
    store: Store
    orchestrator: Orchestrator
    leases: Leases
    slots: Slots
    circuits: Circuits
    rates: Rates
    gate: SlotGate

    @classmethod
    def build(
        cls,
        settings: Settings,
        publisher: Publisher,
        *,
        migrate: bool | None = None,
        pre_ping: bool = False,
        resolve: bool = True,
    ) -> Parts:
        """The parts, publishing through ``publisher``. ``migrate``: bring the schema up
        to date (default: the embedded database does, servers use ``cairn db``);
        ``pre_ping``: see :func:`~cairn.store.database.make_engine`; ``resolve``: see
        :class:`~cairn.engine.registry.Registry`."""
        faults.arm(settings.fault_points)
        clock.skew(settings.clock_skew_s)
        engine = make_engine(settings.effective_database_url, pre_ping=pre_ping)
        if migrate if migrate is not None else settings.database_url is None:
            upgrade(engine)
        store = store_for(engine)
        leases, slots, circuits, rates = _beside_leases(settings)
        registry = Registry(
            store, queues=settings.queues, default_queue=settings.queue, resolve=resolve
        )
        orchestrator = Orchestrator(store, publisher, settings, registry)
        gate = SlotGate(slots, store, publisher, grace_s=settings.recovery_after, circuits=circuits)
        orchestrator.after_commit.append(gate.wake_stopped)
        orchestrator.after_commit.append(partial(_report_anomalies, count=leases.count))
        orchestrator.after_commit.append(
            lambda run_id, decision: leases.announce_stops(stopped_leases(run_id, decision))
        )
        return cls(settings, store, orchestrator, leases, slots, circuits, rates, gate)


def celery_publisher(settings: Settings, celery_app: Any = None) -> Publisher:
    """Node messages to Celery's broker (``celery_app``'s, or one built for it)."""
    # Celery is imported only by a process that publishes to it.
    from cairn.workers.app import CeleryPublisher, make_celery  # noqa: PLC0415

    return CeleryPublisher(
        celery_app or make_celery(settings),
        settings.queue,
        copies=2 if settings.duplicate_deliveries else 1,
    )


def _beside_leases(settings: Settings) -> tuple[Leases, Slots, Circuits, Rates]:
    """The leases, and the slots, circuits and rate buckets kept where they are: in
    Redis, or in this process's memory (the embedded default)."""
    if not settings.redis_url:
        memory = MemoryLeases()
        return memory, MemorySlots(memory), MemoryCircuits(), MemoryRates()
    leases = RedisLeases.from_url(settings.redis_url)
    return (
        leases,
        RedisSlots(leases.client),
        RedisCircuits(leases.client),
        RedisRates(leases.client),
    )


def _report_anomalies(run_id: str, decision: Decision, *, count: Callable[[str], None]) -> None:
    # Imported at the first commit: the alerts pull in the error tracker and the
    # metrics, which a command that only reads runs never needs.
    from cairn.observe.alerts import report_anomalies  # noqa: PLC0415

    report_anomalies(run_id, decision, count=count)
