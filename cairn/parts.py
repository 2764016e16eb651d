"""What every process that moves runs shares, assembled from one Settings object: the
store, the leases and what lives beside them in Redis (slots, circuits, rates), and the
orchestrator with its after-commit hooks — and nothing that executes nodes.

:class:`~cairn.runtime.Runtime` adds the node runner, the scheduler and the broker; the
command line's commands that read or answer runs use these parts alone, so that they
import no worker, no scheduler and no Celery (see :mod:`cairn.cli.deployment`).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from cairn import clock, faults
from cairn.config import Settings
from cairn.engine.hooks import stopped_leases
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.outbox import Publisher
from cairn.engine.registry import Registry
from cairn.engine.slots import SlotGate
from cairn.lease.port import Leases
from cairn.limits.circuits import Circuits
from cairn.limits.concurrency import Slots
from cairn.limits.rates import Rates
from cairn.store.backends import store_for
from cairn.store.database import make_engine, require_schema, upgrade, upgrade_if_behind
from cairn.store.sql import Store

if TYPE_CHECKING:
    from cairn.decider import Decision

# When a process brings the database's schema up to date (see Parts.build).
Migrate = bool | Literal["if_behind"] | None


class Parts:
    """The store and the orchestrator, built at once; the leases and what lives beside
    them (slots, circuits, rates, the slot gate) when first used, so that a command that
    only reads a run's log neither connects to Redis nor imports its client."""

    def __init__(
        self, settings: Settings, store: Store, orchestrator: Orchestrator, publisher: Publisher
    ) -> None:
        self.settings, self.store, self.orchestrator = settings, store, orchestrator
        self._publisher = publisher

    @classmethod
    def build(
        cls,
        settings: Settings,
        publisher: Publisher,
        *,
        migrate: Migrate = None,
        pre_ping: bool = False,
        resolve: bool = True,
        pool_size: int = 5,
    ) -> Parts:
        """The parts, publishing through ``publisher``. ``migrate``: bring the schema up
        to date — True: always; ``"if_behind"``: when it is older than this cairn's (an
        embedded runtime on PostgreSQL); None: the embedded default's SQLite file when it
        is behind, a server database never (a fleet runs ``cairn db upgrade``). ``pre_ping``: see
        :func:`~cairn.store.database.make_engine`; ``resolve``: see
        :class:`~cairn.engine.registry.Registry`; ``pool_size``: database connections
        kept open (as many again may be opened for a burst)."""
        faults.arm(settings.fault_points)
        clock.skew(settings.clock_skew_s)
        engine = make_engine(
            settings.effective_database_url, pool_size=pool_size, pre_ping=pre_ping
        )
        try:
            if migrate is True:
                upgrade(engine)
            elif migrate == "if_behind" or (migrate is None and settings.database_url is None):
                # One query when the schema is current: no Alembic (a tenth of a second
                # of every command on the embedded default).
                upgrade_if_behind(engine)
            else:
                require_schema(engine)
        except BaseException:
            engine.dispose()
            raise
        store = store_for(engine)
        registry = Registry(
            store, queues=settings.queues, default_queue=settings.queue, resolve=resolve
        )
        orchestrator = Orchestrator(store, publisher, settings, registry)
        # The orchestrator's publisher routes messages to builds: a slot's wake too.
        parts = cls(settings, store, orchestrator, orchestrator.publisher)
        orchestrator.after_commit.extend(
            [parts._wake_stopped, parts._report_anomalies, parts._announce_stops]
        )
        return parts

    @cached_property
    def _beside(self) -> tuple[Leases, Slots, Circuits, Rates]:
        return _beside_leases(self.settings)

    @property
    def leases(self) -> Leases:
        return self._beside[0]

    @property
    def slots(self) -> Slots:
        return self._beside[1]

    @property
    def circuits(self) -> Circuits:
        return self._beside[2]

    @property
    def rates(self) -> Rates:
        return self._beside[3]

    @cached_property
    def gate(self) -> SlotGate:
        return SlotGate(
            self.slots,
            self.store,
            self._publisher,
            grace_s=self.settings.recovery_after,
            circuits=self.circuits,
        )

    # -- the after-commit hooks ---------------------------------------------------------

    def _wake_stopped(self, run_id: str, decision: Decision) -> None:
        self.gate.wake_stopped(run_id, decision)

    def _report_anomalies(self, run_id: str, decision: Decision) -> None:
        # Imported at the first commit: the alerts pull in the error tracker and the
        # metrics, which a command that only reads runs never needs.
        from cairn.observe.alerts import report_anomalies  # noqa: PLC0415

        report_anomalies(run_id, decision, count=self.leases.count)

    def _announce_stops(self, run_id: str, decision: Decision) -> None:
        self.leases.announce_stops(stopped_leases(run_id, decision))


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
    Redis, or in this process's memory (the embedded default). Each kind imported as
    chosen: the embedded default needs no Redis client."""
    if not settings.redis_url:
        from cairn.lease.memory import MemoryLeases  # noqa: PLC0415
        from cairn.lease.slots import MemorySlots  # noqa: PLC0415
        from cairn.limits.circuit_state import MemoryCircuits  # noqa: PLC0415
        from cairn.limits.rate_buckets import MemoryRates  # noqa: PLC0415

        memory = MemoryLeases()
        return memory, MemorySlots(memory), MemoryCircuits(), MemoryRates()
    from cairn.lease.redis import RedisLeases  # noqa: PLC0415
    from cairn.lease.redis_slots import RedisSlots  # noqa: PLC0415
    from cairn.limits.circuit_state import RedisCircuits  # noqa: PLC0415
    from cairn.limits.rate_buckets import RedisRates  # noqa: PLC0415

    leases = RedisLeases.from_url(settings.redis_url)
    client = leases.client
    return leases, RedisSlots(client), RedisCircuits(client), RedisRates(client)
