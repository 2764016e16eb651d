"""The effects ledger and the reconciler's rules, on the embedded store (SQLite): what a
call that already happened, failed, or was left in intent by a crash leads to. Riding out
a database outage (real time) and awaited effects (the ledger's writes on a thread):
tests/embedded/test_effects.py. The same rules on PostgreSQL, with real workers and a
real HTTP service, are in tests/integration/test_effects.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from cairn import BusinessError, NotApplied, PermanentError, StaleClaim, TransientError
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
from cairn.store.records import utcnow
from cairn.store.schema import executions
from cairn.store.sql import Store


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


# -- outcomes that are not known ---------------------------------------------------------


def dropped(world: World) -> Any:
    """A call the world applied, whose response was lost on the way back."""

    def call(key: str) -> Any:
        world.call(key)
        raise ConnectionResetError(104, "Connection reset by peer")

    return call


def test_a_call_whose_response_was_lost_is_unknown_not_failed(store: Store, world: World) -> None:
    with pytest.raises(ConnectionResetError):
        ledger(store).effect("shop.charge", "u-1", dropped(world))
    effect = row(store, "u-1")
    assert (effect.status, effect.error_class) == ("unknown", "transient")
    assert "ConnectionResetError" in (effect.error or "")


def test_a_call_that_never_left_is_failed(store: Store, world: World) -> None:
    def refused(key: str) -> Any:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConnectionRefusedError):
        ledger(store).effect("shop.charge", "u-2", refused)
    assert (row(store, "u-2").status, row(store, "u-2").error_class) == ("failed", "transient")
    with pytest.raises(TransientError):
        ledger(store).effect("shop.charge", "u-3", lambda key: _raise(NotApplied("quota")))
    assert row(store, "u-3").status == "failed"


def _raise(error: BaseException) -> Any:
    raise error


def test_an_unknown_outcome_the_world_has_is_backfilled_not_called(
    store: Store, world: World
) -> None:
    with pytest.raises(ConnectionResetError):
        ledger(store).effect("shop.charge", "u-4", dropped(world))
    result = ledger(store, fence=2, attempt=2).effect("shop.charge", "u-4", world.call)
    assert world.calls == ["u-4"] and result == world.records["u-4"]
    effect = row(store, "u-4")
    assert (effect.status, effect.calls, effect.result) == ("applied", 1, result)


def test_an_unknown_outcome_the_world_has_not_is_called_again_with_its_key(
    store: Store, world: World
) -> None:
    def lost_on_the_way(key: str) -> Any:
        raise TimeoutError("timed out")  # sent, perhaps; it never arrived

    with pytest.raises(TimeoutError):
        ledger(store).effect("shop.charge", "u-5", lost_on_the_way)
    assert row(store, "u-5").status == "unknown"
    ledger(store, fence=2, attempt=2).effect("shop.charge", "u-5", world.call)
    assert world.calls == ["u-5"]
    assert (row(store, "u-5").status, row(store, "u-5").calls) == ("applied", 2)


def test_an_unknown_outcome_the_world_cannot_tell_about_is_not_called(
    store: Store, world: World
) -> None:
    with pytest.raises(ConnectionResetError):
        ledger(store).effect("shop.charge", "u-6", dropped(world))
    world.verdict = Verdict.UNKNOWN
    with pytest.raises(EffectUnresolved, match="cannot tell"):
        ledger(store, fence=2, attempt=2).effect("shop.charge", "u-6", world.call)
    assert world.calls == ["u-6"] and row(store, "u-6").status == "unknown"


def test_an_unknown_outcome_without_an_adapter_is_called_again_with_its_key(
    store: Store,
) -> None:
    calls: list[str] = []

    def call(key: str) -> Any:
        calls.append(key)
        if len(calls) == 1:
            raise ConnectionResetError(104, "reset")
        return {"ok": True}

    with pytest.raises(ConnectionResetError):
        ledger(store).effect("mystery.thing", "u-7", call)
    assert ledger(store, fence=2, attempt=2).effect("mystery.thing", "u-7", call) == {"ok": True}
    assert calls == ["u-7", "u-7"] and row(store, "u-7").status == "applied"


# -- stale claims ------------------------------------------------------------------------


def execution(store: Store, fence: int, *, phase: str = "run", node: str = "pay") -> None:
    """The node execution as PostgreSQL records it: ``fence``, its newest claim."""
    with store.transaction() as tx:
        tx.connection.execute(
            insert(executions).values(
                run_id="run-1",
                node=node,
                iteration=1,
                phase=phase,
                status="running",
                attempt=1,
                dispatched_at=utcnow(),
                fence=fence,
            )
        )


def test_an_intent_is_refused_to_a_claim_older_than_the_executions(
    store: Store, world: World
) -> None:
    execution(store, fence=5)  # a takeover recorded its claim
    with pytest.raises(StaleClaim, match="no effect made"):
        ledger(store, fence=3).effect("shop.charge", "s-1", world.call)
    assert world.calls == []
    with store.reading() as tx:
        assert tx.effect("default", "s-1") is None  # nothing written
    # The claim that took over calls; so may one at or above the recorded fence.
    ledger(store, fence=5).effect("shop.charge", "s-1", world.call)
    assert world.calls == ["s-1"]


def test_the_fence_is_the_executions_own(store: Store, world: World) -> None:
    """Another phase's (or node's) claims do not fence this one."""
    execution(store, fence=9, phase="compensate")
    execution(store, fence=9, node="ship")
    ledger(store, fence=1).effect("shop.charge", "s-2", world.call)
    assert world.calls == ["s-2"]
    compensating = EffectLedger(
        store, "default", "run-1", "pay", 1, 1, 3, 100_000, phase="compensate"
    )
    with pytest.raises(StaleClaim):
        compensating.effect("shop.charge", "s-2:refund", world.call)


def test_a_known_key_is_not_reclaimed_by_a_stale_claim(store: Store, world: World) -> None:
    def flaky(key: str) -> Any:
        raise NotApplied("503, not taken")

    with pytest.raises(NotApplied):
        ledger(store, fence=1).effect("shop.charge", "s-3", flaky)
    before = row(store, "s-3")
    execution(store, fence=4)
    with pytest.raises(StaleClaim):
        ledger(store, fence=2, attempt=2).effect("shop.charge", "s-3", world.call)
    assert world.calls == [] and row(store, "s-3") == before


def test_an_unknown_outcome_is_not_backfilled_by_a_stale_claim(store: Store, world: World) -> None:
    with pytest.raises(ConnectionResetError):
        ledger(store, fence=1).effect("shop.charge", "s-4", dropped(world))
    before = row(store, "s-4")
    execution(store, fence=4)
    with pytest.raises(StaleClaim):
        ledger(store, fence=2, attempt=2).effect("shop.charge", "s-4", world.call)
    assert world.calls == ["s-4"] and row(store, "s-4") == before


def test_another_runs_claims_do_not_fence_a_shared_key(store: Store, world: World) -> None:
    """Two runs may share a business key; their fences count different executions."""

    def flaky(key: str) -> Any:
        raise NotApplied("not taken")

    other = EffectLedger(store, "default", "run-2", "pay", 1, 3, 9, 100_000)
    with pytest.raises(NotApplied):
        other.effect("shop.charge", "s-5", flaky)
    ledger(store, fence=1).effect("shop.charge", "s-5", world.call)
    assert world.calls == ["s-5"]


def test_a_lease_no_longer_trusted_makes_no_call(store: Store, world: World) -> None:
    untrusted = ledger(store)
    untrusted.lease_trusted = lambda: False
    with pytest.raises(StaleClaim, match="lease"):
        untrusted.effect("shop.charge", "s-6", world.call)
    assert world.calls == []
    with store.reading() as tx:
        assert tx.effect("default", "s-6") is None


def test_a_lease_lost_between_the_intent_and_the_call_makes_no_call(
    store: Store, world: World
) -> None:
    answers = iter([True, False])  # trusted when the intent is recorded, then not
    lapsing = ledger(store)
    lapsing.lease_trusted = lambda: next(answers)
    with pytest.raises(StaleClaim, match="before calling"):
        lapsing.effect("shop.charge", "s-7", world.call)
    assert world.calls == []
    effect = row(store, "s-7")  # said so: not called, and a retry calls
    assert (effect.status, effect.error_class, effect.calls) == ("failed", "transient", 0)
    ledger(store, fence=2, attempt=2).effect("shop.charge", "s-7", world.call)
    assert world.calls == ["s-7"] and row(store, "s-7").calls == 1


# -- the reconciler and unknown outcomes -------------------------------------------------


def run_row(store: Store, run_id: str, status: str) -> None:
    with store.transaction() as tx:
        tx.insert_run(
            {
                "id": run_id,
                "workflow": "shop",
                "version": 1,
                "status": status,
                "input": {},
                "current": [],
                "created_at": utcnow(),
                "updated_at": utcnow(),
            }
        )


def unknown(store: Store, world: World, key: str, run_id: str) -> None:
    effects = ledger(store)
    effects.run_id = run_id
    with pytest.raises(ConnectionResetError):
        effects.effect("shop.charge", key, dropped(world))


def test_reconcile_resolves_unknown_outcomes_and_flags_money_moved_for_a_failed_run(
    store: Store, world: World, tmp_path: Path
) -> None:
    run_row(store, "failed-run", "failed")
    run_row(store, "live-run", "running")
    run_row(store, "good-run", "succeeded")
    unknown(store, world, "k-failed", "failed-run")  # applied out there; the run failed
    unknown(store, world, "k-live", "live-run")  # applied; its run goes on
    unknown(store, world, "k-good", "good-run")  # applied; its run succeeded anyway
    unknown(store, world, "k-gone", "failed-run")
    del world.records["k-gone"]  # it never took effect
    drift = Reconciler(store, grace_s=0.0).run_once()
    report = drift.to_dict()
    assert [(e["key"], e["reason"]) for e in report["needs_human"]] == [
        ("k-failed", "applied_for_unsuccessful_run")
    ]
    assert report["needs_human"][0]["run_status"] == "failed"
    assert {(e["key"], e["action"]) for e in report["fixed"]} == {
        ("k-live", "backfilled"),
        ("k-good", "backfilled"),
        ("k-gone", "marked_absent"),
    }
    assert {e["key"]: e["outcome"] for e in report["unknown"]} == {
        "k-failed": "flagged: applied_for_unsuccessful_run",
        "k-live": "backfilled",
        "k-good": "backfilled",
        "k-gone": "marked_absent",
    }
    assert report["counts"]["unknown"] == 4
    flagged = row(store, "k-failed")  # the charge is recorded, and a person's to decide
    assert flagged.status == "flagged" and flagged.result == world.records["k-failed"]
    assert flagged.applied_at is not None and flagged.digest is not None
    assert [row(store, key).status for key in ("k-live", "k-good", "k-gone")] == [
        "applied",
        "applied",
        "absent",
    ]
    path = tmp_path / "reconcile.prom"
    drift.write_metrics(path)
    text = path.read_text()
    assert "cairn_reconcile_unknown 4.0" in text
    assert 'cairn_reconcile_drift{reason="applied_for_unsuccessful_run"} 1.0' in text
    assert Reconciler(store, grace_s=0.0).run_once().to_dict()["unknown"] == []  # settled


def test_reconcile_flags_an_unknown_outcome_nobody_can_check_once_its_run_ended(
    store: Store,
) -> None:
    run_row(store, "ended", "failed")
    run_row(store, "going", "running")
    for key, run_id in (("m-ended", "ended"), ("m-going", "going")):
        effects = ledger(store)
        effects.run_id = run_id
        with pytest.raises(TimeoutError):
            effects.effect("mystery.thing", key, lambda key: _raise(TimeoutError("read")))
    report = Reconciler(store, grace_s=0.0).run_once().to_dict()
    assert [(e["key"], e["reason"]) for e in report["needs_human"]] == [("m-ended", "no_adapter")]
    assert {e["key"]: e["outcome"] for e in report["unknown"]} == {
        "m-ended": "flagged: no_adapter",
        "m-going": "left: no adapter, its run goes on",
    }
    assert row(store, "m-ended").status == "flagged"
    assert row(store, "m-going").status == "unknown"  # its node's retry calls again


def test_reconcile_resolves_a_stale_intent_of_an_ended_run(store: Store, world: World) -> None:
    run_row(store, "run-1", "cancelled")
    crashed_intent(store, world, "i-1")
    report = Reconciler(store, grace_s=0.0).run_once().to_dict()
    assert [(e["key"], e["reason"], e["ledger"]) for e in report["needs_human"]] == [
        ("i-1", "applied_for_unsuccessful_run", "intent")
    ]
    assert report["unknown"] == []  # an intent, not an unknown outcome
    assert row(store, "i-1").status == "flagged"
