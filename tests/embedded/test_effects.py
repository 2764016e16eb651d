"""The effects ledger on the wall clock or off the test's thread, on the embedded store
(SQLite): riding out a database outage — retried with backoff for up to
``reconnect_within`` seconds of real time — and the runner letting the outage through
(the node under its heartbeat thread); awaited effects (``ctx.effect_async``), whose
ledger writes go to a thread while the call is awaited. The ledger's and the
reconciler's other rules: tests/unit/test_effects.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from cairn import NotApplied
from cairn.config import Settings
from cairn.effects import EffectLedger
from cairn.errors import StoreUnavailable
from cairn.lease.heartbeat import Heartbeats
from cairn.lease.memory import MemoryLeases
from cairn.model.effects import EffectStatus
from cairn.model.keys import lease_key
from cairn.model.messages import NodeMessage
from cairn.reconnect import is_outage
from cairn.store.sql import Store
from cairn.workers.execute import execute
from tests.unit import test_effects as unit
from tests.unit.test_effects import World, ledger, row

world = unit.world


# -- outages -----------------------------------------------------------------------------


class Flaky:
    """A store whose next ``failures`` transactions find the database gone."""

    def __init__(self, store: Store, failures: int) -> None:
        self.store = store
        self.failures = failures
        self.refused = 0

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        if self.failures:
            self.failures -= 1
            self.refused += 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        with self.store.transaction() as tx:
            yield tx


def flaky_ledger(store: Store, failures: int, within: float = 5.0) -> tuple[EffectLedger, Flaky]:
    flaky = Flaky(store, failures)
    effects = ledger(store)
    effects.store = flaky  # type: ignore[assignment]
    effects.reconnect_within = within
    return effects, flaky


def test_the_ledger_rides_out_a_database_outage(store: Store, world: World) -> None:
    effects, flaky = flaky_ledger(store, failures=2)
    effects.effect("shop.charge", "o-1", world.call)
    assert flaky.refused == 2 and world.calls == ["o-1"]
    assert (row(store, "o-1").status, row(store, "o-1").calls) == ("applied", 1)


def test_a_database_away_for_too_long_is_not_the_handlers_failure(
    store: Store, world: World
) -> None:
    effects, _flaky = flaky_ledger(store, failures=1000, within=0.2)
    with pytest.raises(StoreUnavailable, match="unreachable") as raised:
        effects.effect("shop.charge", "o-2", world.call)
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)
    assert is_outage(raised.value)  # the worker gives the message back
    assert world.calls == []


def test_an_outcome_the_database_could_not_take_is_resolved_when_the_node_runs_again(
    store: Store, world: World
) -> None:
    effects = ledger(store)
    effects.reconnect_within = 0.2

    def call_then_lose_the_database(key: str) -> Any:
        effects.store = Flaky(store, failures=1000)  # type: ignore[assignment]
        return world.call(key)

    with pytest.raises(StoreUnavailable):
        effects.effect("shop.charge", "o-3", call_then_lose_the_database)
    assert row(store, "o-3").status == "intent"
    # The message comes back; the node runs again on the same attempt: no second call.
    again = ledger(store, fence=2).effect("shop.charge", "o-3", world.call)
    assert again == world.records["o-3"] and world.calls == ["o-3"]


def test_the_runner_lets_the_ledgers_outage_through() -> None:
    class Context:
        def handler_state(self) -> dict[str, Any]:
            return {}

    def handler(ctx: Any, state: Any) -> Any:
        raise StoreUnavailable("the database was unreachable for 30 s")

    leases = MemoryLeases()
    heartbeats = Heartbeats(leases)
    message = NodeMessage(
        run_id="run-1", workflow="w", version=1, node="pay", iteration=1, attempt=1
    )
    lease = leases.acquire(lease_key("run-1", "pay", 1, "run"), 30)
    assert lease is not None
    with pytest.raises(StoreUnavailable):
        execute(
            handler,
            Context(),  # type: ignore[arg-type]
            message,
            check=None,
            timeout_s=None,
            heartbeats=heartbeats,
            beat=heartbeats.hold(lease, 10),
            grace_s=10,
            give_up=lambda: None,
            limit_bytes=Settings().max_payload_bytes,
        )


# -- awaited effects (ctx.effect_async) ------------------------------------------------


def _awaited(effect: Any) -> Any:
    return asyncio.run(effect)


def test_an_awaited_effect_is_recorded_once_and_returned_again(store: Store) -> None:
    calls: list[str] = []

    async def call(key: str) -> dict[str, Any]:
        calls.append(key)
        await asyncio.sleep(0)
        return {"id": f"ch-{key}"}

    first = _awaited(ledger(store).effect_async("shop.charge", "a-1", call))
    again = _awaited(ledger(store, fence=2, attempt=2).effect_async("shop.charge", "a-1", call))
    assert first == again == {"id": "ch-a-1"} and calls == ["a-1"]
    assert row(store, "a-1").status is EffectStatus.APPLIED


async def _cancelled_during(effect: Any, started: asyncio.Event) -> None:
    """Cancel ``effect`` once its call is out (``started``: set by the call), however
    long the ledger's intent write took to get it there."""
    task = asyncio.ensure_future(effect)
    await asyncio.wait_for(started.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_cancel_while_the_call_is_out_waits_for_it_and_records_its_outcome(
    store: Store,
) -> None:
    """Not cancellable (the default): the call finishes and is recorded applied."""
    finished: list[str] = []
    started = asyncio.Event()

    async def pay(key: str) -> dict[str, Any]:
        started.set()
        await asyncio.sleep(0.3)
        finished.append(key)
        return {"id": "paid"}

    effect = ledger(store).effect_async("shop.charge", "a-2", pay)
    asyncio.run(_cancelled_during(effect, started))
    assert finished == ["a-2"]
    effect = row(store, "a-2")
    assert (effect.status, effect.result) == (EffectStatus.APPLIED, {"id": "paid"})


def test_a_call_still_out_past_the_cancel_timeout_is_detached_and_unknown(store: Store) -> None:
    slow = ledger(store)
    slow.cancel_timeout_s = 0.1
    started = asyncio.Event()

    async def pay(key: str) -> None:
        started.set()
        await asyncio.sleep(30)

    asyncio.run(_cancelled_during(slow.effect_async("shop.charge", "a-3", pay), started))
    effect = row(store, "a-3")
    assert effect.status is EffectStatus.UNKNOWN  # for the reconciler to settle
    assert effect.error is not None and "may have taken effect" in effect.error


def test_a_cancellable_call_is_cancelled_with_its_node_and_unknown(store: Store) -> None:
    reached: list[str] = []
    started = asyncio.Event()

    async def search(key: str) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            reached.append("cancelled")
            raise

    effect = ledger(store).effect_async("shop.charge", "a-4", search, cancellable=True)
    asyncio.run(_cancelled_during(effect, started))
    assert reached == ["cancelled"]
    assert row(store, "a-4").status is EffectStatus.UNKNOWN


def test_an_awaited_call_that_fails_is_recorded_failed(store: Store) -> None:
    async def refused(key: str) -> None:
        raise NotApplied("card declined before anything was charged")

    with pytest.raises(NotApplied):
        _awaited(ledger(store).effect_async("shop.charge", "a-5", refused))
    assert row(store, "a-5").status is EffectStatus.FAILED
