"""Replay and fork on the embedded default (SQLite), with a JSON-lines file as the
outside world: merge patches and fork keys, the replay ledger's answers (never a call),
key scoping for live forks, and the decider's ``run_forked``. Replays, dry runs and forks
of runs the runtime's workers finished, and the commands:
tests/embedded/test_replay.py. The same on PostgreSQL with real workers and a real HTTP
service: tests/integration/test_replay.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import text

from cairn import BusinessError, TransientError
from cairn.decider.graph import decide
from cairn.definitions.loader import load_file
from cairn.definitions.transitions import transition_table
from cairn.effects import EffectLedger
from cairn.effects.ledger import effect_scope, scoped_key
from cairn.errors import EventRejected, IllegalTransition, InvalidInput
from cairn.model.commands import ArmTimer, Dispatch
from cairn.model.events import NodeSucceeded, RunForked, RunStarted
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.store.sql import Store
from cairn.timetravel import ReplayRefused, register_stub
from cairn.timetravel.fork import BadPatch, merge_patch, parse_patch
from cairn.timetravel.ledger import Answer, ReplayLedger, unregister_stub

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO_ROOT / "tests" / "integration" / "workflows"


# -- pure parts ---------------------------------------------------------------------------


def test_merge_patch_follows_rfc_7386() -> None:
    # The examples of RFC 7386, appendix A.
    for target, patch, result in (
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ):
        assert merge_patch(target, patch) == result, (target, patch)
    target = {"a": {"b": 1}}
    merge_patch(target, {"a": {"b": 2}})
    assert target == {"a": {"b": 1}}  # the target is not changed


def test_patches_are_json_objects() -> None:
    assert parse_patch(None) is None
    assert parse_patch('{"amount": 250, "note": null}') == {"amount": 250, "note": None}
    with pytest.raises(BadPatch, match="not JSON"):
        parse_patch("{amount: 250}")
    with pytest.raises(BadPatch, match="not list"):
        parse_patch("[1]")


def test_a_forks_keys_are_scoped_once() -> None:
    assert scoped_key("o-1:charge", None) == "o-1:charge"
    scoped = scoped_key("o-1:charge", "f-1")
    assert scoped == "o-1:charge@fork:f-1"
    assert scoped_key(scoped, "f-1") == scoped
    assert effect_scope(SimpleNamespace(id="f-1", fork_seq=4)) == "f-1"
    assert effect_scope(SimpleNamespace(id="r-1", fork_seq=None)) is None


# -- the ledgers ----------------------------------------------------------------------------


class World:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def call(self, key: str) -> Any:
        self.calls.append(key)
        return {"id": f"rec-{len(self.calls)}", "key": key}


def ledger(store: Store, scope: str | None = None) -> EffectLedger:
    return EffectLedger(store, "default", "run-1", "pay", 1, 1, 1, 100_000, scope=scope)


def replay_ledger(store: Store, scope: str | None = None) -> ReplayLedger:
    return ReplayLedger(store, "default", "run-1", "pay", 1, 1, 0, 100_000, scope=scope)


def effect_rows(store: Store) -> list[Any]:
    with store.reading() as tx:
        return [tuple(row) for row in tx.connection.execute(text("SELECT * FROM effects"))]


def test_a_forks_ledger_records_and_sends_a_key_of_its_own(store: Store) -> None:
    world = World()
    parent = ledger(store).effect("shop.charge", "o-1:charge", world.call)
    forked = ledger(store, scope="f-1").effect("shop.charge", "o-1:charge", world.call)
    assert world.calls == ["o-1:charge", "o-1:charge@fork:f-1"]  # not deduplicated
    assert parent != forked
    assert ledger(store, scope="f-1").effect("shop.charge", "o-1:charge", world.call) == forked
    assert len(world.calls) == 2  # the fork's own key is applied once
    with pytest.raises(InvalidInput, match="longer than 500"):
        ledger(store, scope="f" * 490).effect("shop.charge", "o-1:charge", world.call)


def test_the_replay_ledger_answers_from_the_ledger_and_never_calls(store: Store) -> None:
    world = World()
    applied = ledger(store).effect("shop.charge", "o-1:charge", world.call)

    def declined(key: str) -> Any:
        raise BusinessError("card declined")

    with pytest.raises(BusinessError):
        ledger(store).effect("shop.charge", "o-2:charge", declined)
    before, calls = effect_rows(store), list(world.calls)

    replaying = replay_ledger(store)
    assert replaying.effect("shop.charge", "o-1:charge", world.call) == applied
    with pytest.raises(BusinessError, match="failed before"):
        replaying.effect("shop.charge", "o-2:charge", world.call)
    with pytest.raises(ReplayRefused, match=r"was never recorded and 'shop\.charge' has no replay"):
        replaying.effect("shop.charge", "o-3:charge", world.call)
    with pytest.raises(InvalidInput, match=r"belongs to a 'shop\.charge' effect"):
        replaying.effect("shop.refund", "o-1:charge", world.call)
    register_stub("shop.charge", lambda request: {"id": f"fake:{request.recorded_key}"})
    try:
        stubbed = replay_ledger(store, scope="f-9").effect("shop.charge", "o-1:charge", world.call)
    finally:
        unregister_stub("shop.charge")
    assert stubbed == {"id": "fake:o-1:charge@fork:f-9"}
    assert [use.answer for use in replaying.uses] == [
        Answer.RECORDED,
        Answer.RECORDED_FAILURE,
        Answer.REFUSED,
    ]
    assert [use.key for use in replaying.refused] == ["o-3:charge"]
    assert world.calls == calls and effect_rows(store) == before  # no call, no write


def test_the_replay_ledger_raises_an_unknown_outcome_again(store: Store) -> None:
    """The recorded execution's call raised (its response lost): a replay raises it too,
    never stubs it over, whatever the world did meanwhile."""

    def lost(key: str) -> Any:
        raise ConnectionResetError(104, "reset by peer")

    with pytest.raises(ConnectionResetError):
        ledger(store).effect("shop.charge", "o-4:charge", lost)
    replaying = replay_ledger(store)
    with pytest.raises(TransientError, match="failed before: ConnectionResetError"):
        replaying.effect("shop.charge", "o-4:charge", World().call)
    (use,) = replaying.uses
    assert (use.answer, use.ledger_status) == (Answer.RECORDED_FAILURE, "unknown")


# -- the decider ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shop_definition() -> Any:
    return load_file(WORKFLOWS / "replay_shop.yaml")


def after_reserve(definition: Any) -> RunState:
    state = RunState("parent", definition.name, definition.version)
    state = decide(definition, state, RunStarted(at=1.0, input={"order": "o-1"})).state
    done = NodeSucceeded(at=2.0, node="reserve", output={"reserve_id": "r-1"})
    return decide(definition, state, done).state


def test_a_fork_resumes_what_was_in_progress_as_new_visits(shop_definition: Any) -> None:
    checkpoint = after_reserve(shop_definition)
    checkpoint.vars["amount"] = 250
    fresh = RunState("fork-1", shop_definition.name, shop_definition.version)
    event = RunForked(at=3.0, parent_run_id="parent", fork_seq=3, state=checkpoint.to_dict())
    decision = decide(shop_definition, fresh, event)
    state = decision.state
    assert state.run_id == "fork-1" and state.status is RunStatus.RUNNING
    assert state.vars == {"order": "o-1", "reserve_id": "r-1", "amount": 250}
    assert [(t.source, t.label, t.target) for t in decision.transitions] == [
        ("(fork)", "fork", "charge")
    ]
    assert decision.commands == (  # a new visit, with its own node timeout
        Dispatch("charge", 2, 1),
        ArmTimer("node_timeout:charge:2:1", 3.0 + 3600),
    )
    assert list(state.timers) == ["node_timeout:charge:2:1"]  # not the parent's visit's
    assert state.visits == {"reserve": 1, "charge": 2}
    assert state.parent is None and state.compensable == []
    rows = {(r.source, r.event, r.target) for r in transition_table(shop_definition)}
    assert ("(fork)", "fork", "charge") in rows
    with pytest.raises(IllegalTransition, match="already started"):
        decide(shop_definition, state, event)
    finished = RunState("parent", shop_definition.name, shop_definition.version)
    finished.status = RunStatus.SUCCEEDED
    with pytest.raises(EventRejected, match="starts from a checkpoint"):
        decide(shop_definition, fresh, RunForked(at=3.0, state=finished.to_dict()))
