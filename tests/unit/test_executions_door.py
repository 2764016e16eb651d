"""The executions door (cairn.engine.executions): each thing a worker's step needs of the
database — its read, the clock, its claim, a takeover's count, its checkpoints and model
calls — as one call that opens its own transaction, with the store's guards intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.config import Settings
from cairn.engine.executions import Executions
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.outbox import RelayOnly
from cairn.model.events import Phase
from cairn.model.keys import ExecutionKey
from cairn.model.messages import InvalidMessage, NodeMessage
from cairn.store.sql import Store
from cairn.testing.store_rows import started

CALL = {"call_index": 0, "provider": "p", "operation": "o", "model": None, "params": {},
        "messages": [], "response": {"answer": 1}, "usage": None, "latency_s": 0.1,
        "history": None}  # fmt: skip


@pytest.fixture
def door(store: Store, tmp_path: Path) -> Executions:
    return Orchestrator(store, RelayOnly(), Settings(home=tmp_path)).executions


def test_a_message_for_no_execution_is_refused(door: Executions) -> None:
    message = NodeMessage("no-such-run", "w", 1, "fetch", 1, 1, Phase.RUN)
    with pytest.raises(InvalidMessage, match="was ever dispatched"):
        door.begin(message)


def test_a_claim_is_fenced_and_a_takeover_counted(store: Store, door: Executions) -> None:
    _run_id, key, _at = started(store)
    claim = door.claim(key, 1, 2, first=False)  # a takeover records fence 2
    assert claim is not None and claim.recoveries == 0
    assert door.claim(key, 1, 2, first=False) is None  # fences only rise
    assert door.take_over(key, 1) == 1
    assert door.take_over(key, 1) == 2
    again = door.claim(key, 1, 3, first=False)
    assert again is not None and again.recoveries == 2
    assert door.take_over(ExecutionKey("no-such-run", "fetch", 1, "run"), 1) is None
    assert door.now() > 0


def test_checkpoints_and_model_calls_go_through_its_parts(store: Store, door: Executions) -> None:
    _run_id, key, _at = started(store)
    assert door.claim(key, 1, 2, first=False) is not None
    checkpoints, calls = door.checkpoints, door.model_calls
    assert checkpoints.save(key, 1, 1, {"by": "stale holder"}, base=0, claim=None) is None
    assert checkpoints.save(key, 1, 2, {"turns": 1}, base=0, claim=None) == 1
    saved = checkpoints.checkpoint_of(key)
    assert saved is not None and saved.context == {"turns": 1}
    checkpoints.drop(key)
    assert checkpoints.checkpoint_of(key) is None
    assert calls.calls_of(key) == ([], frozenset())
    assert not calls.record(key, 1, 1, CALL, {}, claim=None)  # the stale holder
    assert calls.record(key, 1, 2, CALL, {}, claim=None)
    found, _charged = calls.calls_of(key)
    assert [call.call_index for call in found] == [0]
