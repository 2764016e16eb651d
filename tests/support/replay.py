"""What a run's log replays to, held against what its row caches."""

from __future__ import annotations

from dataclasses import replace

from cairn.engine.reads import restore
from cairn.model.state import RunState
from cairn.runtime import Runtime


def replay_agrees(runtime: Runtime, run_id: str) -> RunState:
    """The state the run's row caches is the state its log replays to, and its
    ``current`` the executions that state has running; that state."""
    with runtime.store.reading() as tx:
        row = tx.run(run_id)
        assert row is not None and row.state is not None
        definition = runtime.orchestrator.registry.get(row.workflow_ref, row.version, tx)
        replayed = restore(tx, replace(row, state=None), definition)
    cached = RunState.from_dict(row.state)
    assert replayed.to_dict() == cached.to_dict()
    assert sorted(row.current) == sorted(f"{n.node}#{n.iteration}" for n in cached.active_nodes)
    return cached
