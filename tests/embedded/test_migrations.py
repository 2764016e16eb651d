"""Migrating runs between versions of their workflow on the embedded engine (SQLite), the
move and its rollback each followed by the run finished by the runtime's workers: one
``run_migrated`` event, the run on the new version, restorable from its history, and
completing on it; a rollback returns it to the old version as it was. The checks that
keep a run where it is: tests/unit/test_migrations.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cairn.engine.reads import first_version, replay, restore, versions_of
from cairn.errors import NotMigratable, StoreError
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support.embedded import wait
from tests.unit import test_migrations as unit
from tests.unit.test_migrations import events, migrate, start

runtime = unit.runtime


def test_the_migration_moves_each_movable_run_with_its_event_and_it_completes_on_v2(
    runtime: Runtime,
) -> None:
    orchestrator = runtime.orchestrator
    moving = start(runtime, kind="review", amount=12)
    staying = start(runtime, kind="hold", amount=5)

    report = migrate(runtime, dry_run=False)

    (moved,) = [v for v in report.runs if v.moved]
    assert (moved.run_id, moved.node, moved.to_node) == (moving, "review", "approval")
    view = orchestrator.get_run(moving)
    assert (view.version, view.status, view.current) == (2, RunStatus.WAITING, [])
    assert view.state is not None and view.state.waiting_on is not None
    assert view.state.waiting_on.node == "approval"
    assert view.state.vars["migrated_from"] == 1
    # Only the new graph's nodes are in its state: whoever reads it looks them up in v2.
    assert "review" not in view.state.nodes and view.state.visits["review"] == 1
    assert [(entry.run_id, entry.node) for entry in orchestrator.waiting()] == [
        (staying, "hold"),
        (moving, "approval"),
    ]
    last = events(runtime, moving)[-1]
    assert (last["seq"], last["type"]) == (moved.seq, "run_migrated")
    assert last["data"]["actor"] == "db:tester" and last["data"]["reason"] == "tidy up"
    assert (last["data"]["from_version"], last["data"]["to_version"]) == (1, 2)
    assert orchestrator.get_run(staying).version == 1
    assert [e["type"] for e in events(runtime, staying)][-1] != "run_migrated"

    # Its history, replayed from the first event across both versions, is its state;
    # the state before the move is version 1's.
    with runtime.store.reading() as tx:
        row = tx.run(moving)
        assert row is not None and row.state is not None
        v2 = orchestrator.registry.get(row.workflow_ref, 2, tx)
        versions = versions_of(orchestrator.registry, row, tx)
        rows = tx.events_after(moving, 0)
        start_state = RunState(moving, "journey", first_version(rows, 2))
        *_, (_last, state) = replay(v2, start_state, rows, versions)
        assert state.to_dict() == RunState.from_dict(row.state).to_dict()
        earlier = restore(tx, replace(row, state=None), v2, row.last_seq - 1, versions)
        assert earlier.version == 1 and earlier.waiting_on is not None
        with pytest.raises(StoreError, match="crosses versions"):
            list(replay(v2, RunState(moving, "journey", 1), rows))

    # A second migration finds it on version 2 already: it is no longer selected.
    assert {v.run_id for v in migrate(runtime, dry_run=True).runs} == {staying}

    runtime.start_workers()
    orchestrator.signal(moving, "approve")
    assert wait(runtime, moving) is RunStatus.SUCCEEDED
    ran = [e["data"].get("node") for e in events(runtime, moving) if e["type"] == "node_succeeded"]
    assert ran == ["check", "book"]  # v2's nodes


def test_a_migration_rolled_back_returns_the_run_to_v1_as_it_was(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    run_id = start(runtime, kind="review", amount=12)
    before = orchestrator.get_run(run_id).state
    assert before is not None
    migrate(runtime, dry_run=False)
    migrated_seq = events(runtime, run_id)[-1]["seq"]

    undone = orchestrator.rollback_migration(run_id, actor="db:tester", reason="too soon")

    view = orchestrator.get_run(run_id)
    assert (undone.version, undone.status, undone.seq) == (1, RunStatus.WAITING, view.last_seq)
    assert view.version == 1
    assert view.state is not None and view.state.vars == before.vars
    assert view.state.waiting_on is not None and view.state.waiting_on.node == "review"
    assert view.state.timers == before.timers  # the old deadline, not a new one
    last = events(runtime, run_id)[-1]
    assert last["type"] == "run_migrated"
    assert last["data"]["undoes"] == migrated_seq and last["data"]["actor"] == "db:tester"
    with pytest.raises(NotMigratable, match="rolled back already"):
        orchestrator.rollback_migration(run_id, actor="db:tester")

    runtime.start_workers()
    orchestrator.signal(run_id, "approve")
    assert wait(runtime, run_id) is RunStatus.SUCCEEDED
    ran = [e["data"].get("node") for e in events(runtime, run_id) if e["type"] == "node_succeeded"]
    assert ran == ["book"]  # v1's path: no check
