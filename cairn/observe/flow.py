"""Concurrency limits as an operator sees them: per pool, how many executions hold a slot
(Redis), how many wait for one and since when (PostgreSQL)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cairn.engine.slots import Slots
from cairn.store.records import to_epoch
from cairn.store.sql import Store


@dataclass(frozen=True)
class PoolReport:
    pool: str
    limit: int | None  # as its newest waiter declared it (None: nobody waits)
    running: int
    waiting: int
    oldest_wait_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pool_reports(store: Store, slots: Slots) -> list[PoolReport]:
    """Every pool a lease holds a slot of, or an execution waits on."""
    with store.reading() as tx:
        now = tx.now()
        waiting = {pool.pool: pool for pool in tx.waiting_pools()}
    names = sorted({*waiting, *slots.pools()})
    running = slots.holders(names)
    reports = []
    for name in names:
        wait = waiting.get(name)
        reports.append(
            PoolReport(
                name,
                wait.limit if wait is not None else None,
                running.get(name, 0),
                wait.waiting if wait is not None else 0,
                now - to_epoch(wait.oldest) if wait is not None else None,
            )
        )
    return [r for r in reports if r.running or r.waiting]
