"""A worker begins a run's next node on the state its own last step left — not a restore
of a state too large for the row's cache (the latest snapshot and every event since) —
and only while the run is where that step left it: a run another process moved meanwhile
is restored as the database has it. On PostgreSQL, the embedded runtime's worker threads
(the restores are counted in this process)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.config import Settings
from cairn.definitions.builder import Workflow
from cairn.engine import executions
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime

VISITS = 40


def visit(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    # What a worker that restored the run would see: JSON's kinds, never a tuple.
    if "pair" in state and not isinstance(state["pair"], list):
        raise TypeError(f"the state holds {type(state['pair']).__name__}, not JSON's list")
    i = int(state.get("i", 0)) + 1
    return {"i": i, "notes": ["x" * 200], "pair": (i, i)}


def more(state: dict[str, Any]) -> bool:
    return bool(state["i"] < state["n"])


def after_approval(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"saw": state["decisions"]["review"]["payload"]["approval"]}


heads_loop = (
    Workflow("heads_loop", version=1, max_visits=1000, reducers={"notes": "append"})
    .task("visit", visit, branch={"guard": more, "cases": {True: "visit", False: "done"}})
    .end("done")
)
heads_approval = (
    Workflow("heads_approval", version=1)
    .task("prepare", visit, next="review")
    .wait("review", signals={"approve": "use"}, timeout="1h", on_timeout="use")
    .task("use", after_approval, next="done")
    .end("done")
)


@pytest.fixture
def restores(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runs each begin restored (rather than took the head its process left)."""
    counted: list[str] = []
    original = executions.restore

    def counting(tx: Any, row: Any, *args: Any, **kwargs: Any) -> RunState:
        counted.append(row.id)
        return original(tx, row, *args, **kwargs)

    monkeypatch.setattr(executions, "restore", counting)
    return counted


@pytest.fixture
def build(database_url: str, tmp_path: Path) -> Iterator[Callable[..., Runtime]]:
    built: list[Runtime] = []

    def make(*, workers: bool) -> Runtime:
        runtime = Runtime.build(
            Settings(
                home=tmp_path,
                database_url=database_url,
                workflows=[__name__],
                scheduler_interval=0.02,
                state_cache_bytes=0,  # never on the row: every begin would restore
                snapshot_every_events=10,
            ),
            migrate=True,
        )
        built.append(runtime)
        if workers:
            runtime.start_workers()
            runtime.start_scheduler()
        return runtime

    yield make
    for runtime in reversed(built):
        runtime.close()


def finished(runtime: Runtime, run_id: str, timeout_s: float = 60.0) -> RunState:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if runtime.orchestrator.get_run(run_id).status.terminal:
            break
        time.sleep(0.05)
    with runtime.store.reading() as tx:
        row = tx.run(run_id)
        definition = runtime.orchestrator.registry.get(row.workflow_ref, row.version, tx)
        return executions.restore(tx, row, definition)


def test_each_visit_begins_on_the_head_its_step_left(
    build: Callable[..., Runtime], restores: list[str]
) -> None:
    runtime = build(workers=True)
    run_id = runtime.orchestrator.submit("heads_loop", {"n": VISITS, "i": 0})
    state = finished(runtime, run_id)
    assert state.status is RunStatus.SUCCEEDED, state.reason
    assert state.vars["i"] == VISITS and len(state.vars["notes"]) == VISITS
    assert state.vars["pair"] == [VISITS, VISITS]  # as stored, and as every visit saw it
    # The first visit restores what the submission wrote; the others (nearly all) begin
    # on their head. Before, each of the 40 restored.
    assert restores.count(run_id) <= 3, len(restores)


def test_a_run_moved_by_another_process_is_restored_as_the_database_has_it(
    build: Callable[..., Runtime], restores: list[str]
) -> None:
    worker = build(workers=True)
    elsewhere = build(workers=False)  # an API process, say: its own steps, its own heads
    run_id = worker.orchestrator.submit("heads_approval", {"n": 1})
    deadline = time.monotonic() + 30
    while worker.orchestrator.get_run(run_id).status is not RunStatus.WAITING:
        assert time.monotonic() < deadline, "the run did not reach its wait"
        time.sleep(0.05)
    before = restores.count(run_id)
    elsewhere.orchestrator.signal(run_id, "approve", {"approval": "alice"})
    state = finished(worker, run_id)
    assert state.status is RunStatus.SUCCEEDED, state.reason
    assert state.vars["saw"] == "alice"  # the signal's step, which this worker never saw
    assert restores.count(run_id) > before
