"""Which steps merge onto their run (cairn.engine.merges.branch_merge), and as what: a
branch's success that leaves its join undecided, as operations on what is its own; every
other step the ordinary way. Pure: planned on states, nothing written."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from cairn.config import Settings
from cairn.definitions.builder import Workflow
from cairn.engine.inputs import FreshRun
from cairn.engine.merges import branch_merge
from cairn.engine.plan import Planner
from cairn.engine.reads import Restored
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Event, NodeFailed, NodeSucceeded, RunStarted
from cairn.model.outcomes import BranchMerge
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


def _fan(join: dict[str, Any] | None = None, branches: int = 3) -> WorkflowDefinition:
    names = [f"b{index}" for index in range(1, branches + 1)]
    workflow = Workflow("fan", version=1).parallel("fan", names, join=join, next="after")
    for name in names:
        workflow.task(name, noop)
    return workflow.task("after", noop, next="done").end("done").build()


SETTINGS = Settings(home="/tmp/cairn-unused")
PLANNER = Planner(SETTINGS)


def _started(definition: WorkflowDefinition) -> Restored:
    values = {
        "id": "r1",
        "namespace": "default",
        "workflow": definition.name,
        "workflow_namespace": "default",
        "version": definition.version,
        "input": {},
        "request_id": None,
        "webhook_url": None,
        "created_at": datetime.now(UTC),
        "updated_at": datetime.now(UTC),
        "status": RunStatus.PENDING.value,
        "current": [],
    }
    fresh = FreshRun.record(values)
    _decision, plan = PLANNER.plan(
        FreshRun.of(values), definition, RunState("r1", definition.name, 1), RunStarted(at=1.0)
    )
    assert plan is not None
    return _after(Restored(fresh, RunState("r1", definition.name, 1), 1.0), plan)


def _after(known: Restored, plan: Any) -> Restored:
    run = plan.run
    row = replace(
        known.row, status=run.status, last_seq=run.last_seq, current=run.current, state={}
    )
    return Restored(row, plan.decision.state, known.db_time)


def _merge(
    definition: WorkflowDefinition, known: Restored, event: Event
) -> tuple[BranchMerge | None, Restored]:
    _decision, plan = PLANNER.plan(known.row, definition, known.state, event)
    assert plan is not None
    return branch_merge(known, definition, event, plan, SETTINGS), _after(known, plan)


def _ok(node: str, at: float = 2.0, **more: Any) -> NodeSucceeded:
    return NodeSucceeded(at=at, node=node, output={node: 1}, **more)


def test_a_branch_success_its_join_does_not_wait_on_merges_as_its_own_changes() -> None:
    definition = _fan()
    known = _started(definition)
    merge, _known = _merge(definition, known, _ok("b2"))
    assert merge is not None
    assert merge.join == "fan"
    assert (merge.counted, merge.at_least, merge.at_most) == (["pending"], 1, 2)
    assert merge.left == ["b2#1"]
    paths = {(op["op"], tuple(op["path"])) for op in merge.ops}
    assert paths == {
        ("set", ("nodes", "b2")),
        ("set", ("joins", "fan", "outcomes", "b2")),
        ("set", ("joins", "fan", "outputs", "b2")),
        ("drop", ("timers", "node_timeout:b2:1:1")),
        ("add", ("steps",)),
        ("set", ("updated_at",)),
    }
    assert {"op": "add", "path": ["steps"], "value": 1} in merge.ops


def test_the_branch_that_decides_its_join_is_not_a_merge() -> None:
    definition = _fan()
    known = _started(definition)
    _first, known = _merge(definition, known, _ok("b1"))
    _second, known = _merge(definition, known, _ok("b2"))
    last, _known = _merge(definition, known, _ok("b3"))
    assert last is None  # it dispatches the node after the join


def test_a_failure_a_charge_or_messages_are_not_merged() -> None:
    definition = _fan()
    known = _started(definition)
    failed = NodeFailed(at=2.0, node="b1", message="no")
    assert _merge(definition, known, failed)[0] is None
    assert _merge(definition, known, _ok("b1", charges={"usd": 0.5}))[0] is None
    said = ({"role": "assistant", "content": "hi"},)
    assert _merge(definition, known, _ok("b1", messages=said))[0] is None


def test_a_quorum_merges_while_fewer_than_it_have_succeeded() -> None:
    definition = _fan({"policy": "quorum", "k": 3, "rest": "finish"}, branches=5)
    known = _started(definition)
    merge, _known = _merge(definition, known, _ok("b1"))
    assert merge is not None
    assert (merge.counted, merge.at_least, merge.at_most) == (["succeeded", "defaulted"], 0, 1)
    two = _fan({"policy": "quorum", "k": 1}, branches=3)
    assert _merge(two, _started(two), _ok("b1"))[0] is None  # one success decides it


def test_a_due_snapshot_or_a_state_the_row_does_not_cache_is_not_merged() -> None:
    definition = _fan()
    known = _started(definition)
    uncached = replace(known, row=replace(known.row, state=None))
    assert _merge(definition, uncached, _ok("b1"))[0] is None
    due = replace(known, row=replace(known.row, snapshot_seq=known.row.last_seq - 60))
    assert _merge(definition, due, _ok("b1"))[0] is None
    assert known.row.status is RunStatus.RUNNING
