"""Concurrency limits and circuits as an operator sees them: per pool, how many executions
hold a slot (Redis), how many wait for one and since when (PostgreSQL); per dependency,
its circuit's state and how many executions wait for it to close."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cairn.limits.circuits import CircuitReport, Circuits, circuit_pool, dependency_of
from cairn.limits.concurrency import Slots
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


@dataclass(frozen=True)
class CircuitView:
    circuit: CircuitReport
    waiting: int  # executions parked until it closes (or lets them probe)
    probing: int  # executions running as its probe

    def to_dict(self) -> dict[str, Any]:
        return {**self.circuit.to_dict(), "waiting": self.waiting, "probing": self.probing}


def circuit_views(circuits: Circuits, pools: list[PoolReport]) -> list[CircuitView]:
    """Every circuit not plainly closed, or with executions waiting on it."""
    by_dependency = {name: p for p in pools if (name := dependency_of(p.pool)) is not None}
    reports = {r.dependency: r for r in circuits.reports()}
    for name in by_dependency.keys() - reports.keys():  # closed, its waiters not yet woken
        reports[name] = CircuitReport(name, "closed", 0)
    views = []
    for name, report in sorted(reports.items()):
        pool = by_dependency.get(name)
        views.append(CircuitView(report, pool.waiting if pool else 0, pool.running if pool else 0))
    return views


def is_circuit_pool(report: PoolReport) -> bool:
    return report.pool.startswith(circuit_pool(""))
