"""The effects ledger and the reconciler's rules, on the embedded store (SQLite): what a
call that already happened, failed, or was left in intent by a crash leads to. The same
rules on PostgreSQL, with real workers and a real HTTP service, are in
tests/integration/test_effects.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import BusinessError, PermanentError, TransientError
from cairn.effects import (
    Check,
    Effect,
    EffectLedger,
    EffectUnresolved,
    Verdict,
    load_adapters,
    register_adapter,
)
from cairn.effects import adapters as adapter_registry
from cairn.errors import ConfigError, InvalidInput
from cairn.reconciler import Reconciler
from cairn.store.database import make_engine, upgrade
from cairn.store.repository import Store


class World:
    """An external system with a memory, and an adapter that asks it."""

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}
        self.calls: list[str] = []
        self.verdict: Verdict | None = None  # forced answer; None: by the records

    def call(self, key: str) -> Any:
        self.calls.append(key)
        self.records[key] = {"id": f"rec-{len(self.records) + 1}", "key": key}
        return self.records[key]

    def check(self, effect: Effect) -> Check:
        if self.verdict is not None:
            return Check(self.verdict, detail="forced")
        record = self.records.get(effect.key)
        return Check(Verdict.APPLIED, record) if record else Check(Verdict.ABSENT)

    def apply(self, effect: Effect) -> Any:
        return self.call(effect.key)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    engine = make_engine(f"sqlite:///{tmp_path / 'cairn.db'}")
    upgrade(engine)
    yield Store(engine)
    engine.dispose()


@pytest.fixture
def world() -> Iterator[World]:
    found = World()
    register_adapter("shop.charge", found)
    yield found
    adapter_registry._adapters.pop("shop.charge", None)


def ledger(store: Store, fence: int = 1, attempt: int = 1) -> EffectLedger:
    return EffectLedger(store, "default", "run-1", "pay", 1, attempt, fence, 100_000)


def row(store: Store, key: str) -> Effect:
    with store.reading() as tx:
        return Effect.from_row(tx.effect("default", key))


def test_an_applied_key_returns_its_result_without_calling(store: Store, world: World) -> None:
    first = ledger(store).effect("shop.charge", "o-1:charge", world.call)
    again = ledger(store, fence=2, attempt=2).effect("shop.charge", "o-1:charge", world.call)
    assert again == first and world.calls == ["o-1:charge"]
    effect = row(store, "o-1:charge")
    assert (effect.status, effect.calls, effect.result) == ("applied", 1, first)
    assert effect.digest is not None and len(effect.digest) == 64


def test_a_business_failure_is_answered_again_without_calling(store: Store) -> None:
    calls = []

    def declined(key: str) -> Any:
        calls.append(key)
        raise BusinessError("card declined")

    for _ in range(2):
        with pytest.raises(BusinessError, match="declined"):
            ledger(store).effect("shop.charge", "o-2:charge", declined)
    assert calls == ["o-2:charge"]
    assert row(store, "o-2:charge").error_class == "business"


def test_a_transient_failure_is_called_again_with_the_same_key(store: Store, world: World) -> None:
    def flaky(key: str) -> Any:
        raise TransientError("503")

    with pytest.raises(TransientError):
        ledger(store).effect("shop.charge", "o-3:charge", flaky)
    result = ledger(store, fence=2, attempt=2).effect("shop.charge", "o-3:charge", world.call)
    effect = row(store, "o-3:charge")
    assert (effect.status, effect.calls, effect.result) == ("applied", 2, result)


def crashed_intent(store: Store, world: World, key: str) -> None:
    """A call that reached the world, whose caller died before recording the outcome."""

    def call_then_die(key: str) -> Any:
        world.call(key)
        raise SystemExit  # not an Exception: nothing is recorded, as with kill -9

    with pytest.raises(SystemExit):
        ledger(store).effect("shop.charge", key, call_then_die)
    assert row(store, key).status == "intent"


def test_a_left_intent_applied_in_the_world_is_backfilled_not_called(
    store: Store, world: World
) -> None:
    crashed_intent(store, world, "o-4:charge")
    result = ledger(store, fence=2).effect("shop.charge", "o-4:charge", world.call)
    assert world.calls == ["o-4:charge"] and result == world.records["o-4:charge"]
    assert row(store, "o-4:charge").status == "applied"


def test_a_left_intent_absent_in_the_world_is_called(store: Store, world: World) -> None:
    crashed_intent(store, world, "o-5:charge")
    world.records.clear()  # it never arrived
    ledger(store, fence=2).effect("shop.charge", "o-5:charge", world.call)
    assert world.calls == ["o-5:charge", "o-5:charge"]
    assert row(store, "o-5:charge").calls == 2


def test_a_left_intent_the_world_cannot_tell_about_is_not_called(
    store: Store, world: World
) -> None:
    crashed_intent(store, world, "o-6:charge")
    world.verdict = Verdict.UNKNOWN
    with pytest.raises(EffectUnresolved, match="cannot tell"):
        ledger(store, fence=2).effect("shop.charge", "o-6:charge", world.call)
    assert world.calls == ["o-6:charge"]


def test_a_newer_claim_owns_the_effect(store: Store, world: World) -> None:
    """A stale worker (its node taken over by a newer claim) does not call."""
    crashed_intent(store, world, "o-7:charge")
    with store.transaction() as tx:
        effect = tx.effect("default", "o-7:charge")
        tx.update_effect(effect.id, {"fence": 7})  # the takeover recorded its claim
    with pytest.raises(TransientError, match="newer claim"):
        ledger(store, fence=3).effect("shop.charge", "o-7:charge", world.call)
    assert world.calls == ["o-7:charge"]


def test_keys_and_names_are_checked(store: Store, world: World) -> None:
    ledger(store).effect("shop.charge", "o-10", world.call)
    with pytest.raises(InvalidInput, match=r"belongs to a 'shop\.charge' effect"):
        ledger(store).effect("mail.send", "o-10", world.call)
    with pytest.raises(InvalidInput, match="business key"):
        ledger(store).effect("shop.charge", "", world.call)
    with pytest.raises(InvalidInput, match="identifier-like"):
        ledger(store).effect("shop charge!", "o-11", world.call)


def test_a_result_that_is_not_json_is_refused_but_its_application_kept(store: Store) -> None:
    with pytest.raises(PermanentError, match="JSON"):
        ledger(store).effect("shop.charge", "o-12", lambda key: {"at": object()})
    assert row(store, "o-12").status == "applied"


def test_adapters_from_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="name=module:attr"):
        load_adapters(["nonsense"])
    with pytest.raises(ConfigError, match=r"No module"):
        load_adapters(["x=no.such.module:Adapter"])


# -- the reconciler ---------------------------------------------------------------------


def test_reconcile_backfills_marks_absent_and_flags(store: Store, world: World) -> None:
    crashed_intent(store, world, "r-1")  # applied out there: backfill
    crashed_intent(store, world, "r-2")
    del world.records["r-2"]  # never arrived: absent
    ledger(store).effect("shop.charge", "r-3", world.call)
    del world.records["r-3"]  # applied, then lost out there: flag for a person
    ledger(store).effect("shop.charge", "r-4", world.call)  # consistent
    drift = Reconciler(store, grace_s=0.0).run_once()
    report = drift.to_dict()
    assert {(e["key"], e["action"]) for e in report["fixed"]} == {
        ("r-1", "backfilled"),
        ("r-2", "marked_absent"),
    }
    assert [(e["key"], e["reason"]) for e in report["needs_human"]] == [
        ("r-3", "missing_externally")
    ]
    assert report["consistent"] == 1 and report["checked"] == 4
    assert [row(store, key).status for key in ("r-1", "r-2", "r-3", "r-4")] == [
        "applied",
        "absent",
        "flagged",
        "applied",
    ]
    # Idempotent: nothing is left to do, and a flagged effect refuses to run again.
    assert Reconciler(store, grace_s=0.0).run_once().checked == 0
    with pytest.raises(PermanentError, match="flagged"):
        ledger(store).effect("shop.charge", "r-3", world.call)


def test_reconcile_reports_effects_nobody_can_check(store: Store) -> None:
    ledger(store).effect("mystery.thing", "m-1", lambda key: {"ok": True})
    report = Reconciler(store, grace_s=0.0).run_once().to_dict()
    assert report["no_adapter"] == ["mystery.thing"] and report["checked"] == 0


def test_reconcile_metrics_file(store: Store, world: World, tmp_path: Path) -> None:
    ledger(store).effect("shop.charge", "m-2", world.call)
    world.records.clear()
    drift = Reconciler(store, grace_s=0.0).run_once()
    path = tmp_path / "reconcile.prom"
    drift.write_metrics(path)
    text = path.read_text()
    assert 'cairn_reconcile_drift{reason="missing_externally"} 1.0' in text
    assert "cairn_reconcile_checked 1.0" in text
