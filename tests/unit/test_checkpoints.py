"""Checkpoints inside a node, in this process on SQLite: what ``ctx.checkpoint()`` saves
(what the node added, not the run's history), how a re-execution lays it over its state,
the node's automatic policy at safe points, and the claim that fences it. (An async
checkpoint, committed on a thread: tests/embedded/test_checkpoints.py; a worker killed
mid-loop on real services: tests/acceptance/test_checkpoints.py.)"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cairn.engine.node_checkpoints import NodeCheckpoints
from cairn.model.definition import CheckpointPolicy
from cairn.model.failures import StaleClaim
from cairn.model.keys import ExecutionKey
from cairn.model.state import RunState
from cairn.store.sql import Store
from cairn.testing.store_rows import started
from cairn.workers.checkpoints import Checkpoints
from cairn.workers.context import StepContext
from tests.support.contexts import step_context


def _context(
    store: Store,
    key: ExecutionKey,
    *,
    state: RunState,
    fence: int = 1,
    policy: CheckpointPolicy | None = None,
    restore: bool = False,
    trusted: bool = True,
) -> StepContext:
    checkpoints = Checkpoints(
        NodeCheckpoints(store),
        key,
        1,
        fence,
        max_bytes=100_000,
        reconnect_within=0.0,
        lease_trusted=lambda: trusted,
        policy=policy,
    )
    return step_context(
        key, state, checkpoints=checkpoints, restored=checkpoints.load() if restore else None
    )


def _state(run_id: str, **extra: Any) -> RunState:
    state = RunState(run_id, "w", 1)
    state.messages = [{"role": "user", "content": "plan my trip"}]
    state.sessions = {"browser": {"page": 1}, "old": {"cursor": 3}}
    for name, value in extra.items():
        setattr(state, name, value)
    return state


def test_a_re_execution_resumes_with_what_the_node_had_added(store: Store) -> None:
    run_id, key, _at = started(store)
    first = _context(store, key, state=_state(run_id))
    first.messages.append({"role": "assistant", "content": "turn 0"})
    first.sessions["browser"] = {"page": 4}
    del first.sessions["old"]
    first.scratch["step"] = "searching"
    first.progress(1, 3, "searching")
    assert first.checkpoint() == 1
    first.messages.append({"role": "assistant", "content": "lost with the crash"})

    # Meanwhile another node added a message to the run: kept, under the node's own.
    later = _state(run_id)
    later.messages = [*later.messages, {"role": "tool", "content": "from a sibling"}]
    again = _context(store, key, state=later, restore=True)
    assert again.resumed and again.resumed_from == 1
    assert [m["content"] for m in again.messages] == ["plan my trip", "from a sibling", "turn 0"]
    assert again.sessions == {"browser": {"page": 4}}
    assert again.scratch == {"step": "searching"}
    assert again.last_progress is not None and again.last_progress.done == 1
    assert again.turns == 1
    # What the step then commits is everything the node added, restored or new.
    assert [m["content"] for m in again.added_messages()] == ["turn 0"]
    assert again.changed_sessions() == {"browser": {"page": 4}, "old": None}


def test_the_policy_checkpoints_at_safe_points_every_n_turns(store: Store) -> None:
    run_id, key, _at = started(store)
    ctx = _context(store, key, state=_state(run_id), policy=CheckpointPolicy(turns=2))
    saved = []
    for turn in range(5):
        ctx.messages.append({"role": "assistant", "content": f"turn {turn}"})
        ctx.progress(turn + 1, 5)  # a safe point
        with store.reading() as tx:
            found = tx.checkpoint_of(key)
        saved.append(None if found is None else found.context["turns"])
    assert saved == [None, 2, 2, 4, 4]


def test_the_policy_checkpoints_after_a_while_at_safe_points(store: Store) -> None:
    run_id, key, _at = started(store)
    policy = CheckpointPolicy(every=timedelta(0))  # due at every safe point
    ctx = _context(store, key, state=_state(run_id), policy=policy)
    ctx.scratch["at"] = "first"
    ctx.raise_if_cancelled()
    with store.reading() as tx:
        found = tx.checkpoint_of(key)
    assert found is not None and found.context["scratch"] == {"at": "first"}


def test_a_stale_claim_saves_no_checkpoint(store: Store) -> None:
    run_id, key, _at = started(store)
    with pytest.raises(StaleClaim, match="lease"):
        _context(store, key, state=_state(run_id), trusted=False).checkpoint()
    with store.transaction() as tx:
        assert tx.claim_execution(key, 1, 2)  # taken over
    with pytest.raises(StaleClaim, match="newer claim"):
        _context(store, key, state=_state(run_id), fence=1).checkpoint()
    with store.reading() as tx:
        assert tx.checkpoint_of(key) is None


def test_a_checkpoint_over_the_payload_limit_is_refused_clearly(store: Store) -> None:
    run_id, key, _at = started(store)
    ctx = _context(store, key, state=_state(run_id))
    ctx.scratch["page"] = "x" * 200_000
    with pytest.raises(Exception, match="artifact"):
        ctx.checkpoint()
