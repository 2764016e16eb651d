"""A fan-out branch's success merged onto its run as the run is by then (PostgreSQL):
branches finishing together in two processes each write once — no lost statement, no
run lock — the join is decided once, by the ordinary path, and replaying the log gives
the state the row holds at every point."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cairn.definitions.builder import Workflow
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support.replay import replay_agrees
from tests.support.taking import run_together, taken, two_processes

BRANCHES = 8
GATE = threading.Barrier(BRANCHES, timeout=30)


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


def branch(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    GATE.wait()  # all finish at once: their completions race for the run row
    return {ctx.node: ctx.attempt}


def lone(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {ctx.node: ctx.attempt}


def charging(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    ctx.charge(usd=0.25)
    return {ctx.node: ctx.attempt}


_NAMES = [f"b{index}" for index in range(1, BRANCHES + 1)]
merging = Workflow("merging", version=1)
merging.parallel("fan", _NAMES, next="after")
for _name in _NAMES:
    merging.task(_name, branch)
merging.task("after", noop, next="done")
merging.end("done")

_VOTERS = [f"v{index}" for index in range(1, 7)]
quorum = Workflow("quorum_merging", version=1)
quorum.parallel("fan", _VOTERS, join={"policy": "quorum", "k": 4, "rest": "finish"}, next="after")
for _name in _VOTERS:
    quorum.task(_name, lone)
quorum.task("after", noop, next="done")
quorum.end("done")

charged = Workflow("charged_merging", version=1)
charged.parallel("fan", ["c1", "c2", "c3"], next="after")
for _name in ["c1", "c2", "c3"]:
    charged.task(_name, charging if _name == "c2" else lone)
charged.task("after", noop, next="done")
charged.end("done")


@pytest.fixture
def processes(database_url: str, tmp_path: Path) -> Iterator[list[Runtime]]:
    """Two worker processes; the runs are submitted as an API server submits them,
    leaving no head: every branch begins from a read (a branch begun from the head of a
    step its process wrote the ordinary way is written the ordinary way first)."""
    with two_processes(tmp_path / "home", __name__, database_url) as runtimes:
        for runtime in runtimes:
            runtime.orchestrator.steps.starts_leave_heads = False
        yield runtimes


def _merges(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> Tried:
    """Whether each merge tried by either runtime (one class) was written; the branch of
    each in ``tried.nodes``."""
    tx_class = type(runtime.store).tx_class
    merge_step = tx_class.merge_step
    written = Tried()

    merge_steps = tx_class.merge_steps

    def counted(self: Any, step: Any, merge: Any) -> Any:
        done, merged = merge_step(self, step, merge)
        written.append(merged is not None)
        written.nodes.append(step.key.node)
        return done, merged

    def counted_together(self: Any, steps: Any) -> Any:
        done = merge_steps(self, steps)
        for (step, _merge), (_completion, merged) in zip(steps, done, strict=True):
            written.append(merged is not None)
            written.nodes.append(step.key.node)
        return done

    monkeypatch.setattr(tx_class, "merge_step", counted)
    monkeypatch.setattr(tx_class, "merge_steps", counted_together)
    return written


class Tried(list[bool]):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[str] = []

    def clear(self) -> None:
        super().clear()
        self.nodes.clear()


def _step_between(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, step: Callable[[], object]
) -> None:
    """``step`` taken once, just before the next merge is written: after its plan."""
    tx_class = type(runtime.store).tx_class
    merge_step = tx_class.merge_step
    armed = [True]

    def between(self: Any, *args: Any, **kwargs: Any) -> Any:
        if armed.pop() if armed else False:
            step()
        return merge_step(self, *args, **kwargs)

    monkeypatch.setattr(tx_class, "merge_step", between)


def _no_locking_path(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    tx_class = type(runtime.store).tx_class
    finish_and_lock = tx_class.finish_and_lock
    locked: list[Any] = []

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        locked.append(args[0])
        return finish_and_lock(self, *args, **kwargs)

    monkeypatch.setattr(tx_class, "finish_and_lock", counted)
    return locked


def _seqs_and_rows(runtime: Runtime, run_id: str) -> tuple[list[int], list[tuple[Any, ...]]]:
    events = runtime.orchestrator.events(run_id)
    with runtime.store.reading() as tx:
        rows = tx.connection.execute(
            text("SELECT node, attempt, status FROM node_executions WHERE run_id = :r"),
            {"r": run_id},
        ).all()
    return [e["seq"] for e in events], [tuple(row) for row in rows]


def test_branches_finishing_together_in_two_processes_merge_andreplay_agrees(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = processes
    written = _merges(one, monkeypatch)
    locked = _no_locking_path(one, monkeypatch)
    for _round in range(3):
        written.clear()
        run_id = one.orchestrator.submit("merging", {})
        branches = taken(one, "b")
        pairs = [((one, two)[index % 2], message) for index, message in enumerate(branches)]
        assert run_together(pairs) == ["committed"] * BRANCHES
        assert locked == []
        # Seven of the eight merge — alone, or with the siblings queued beside them in
        # their process — each once; the last decides the join the ordinary way (the
        # merges it tried, planned on the run before its siblings' last, refused: a
        # refused merge returns the run as its statement found it).
        assert written.count(True) == BRANCHES - 1
        merged = {node for node, ok in zip(written.nodes, written, strict=True) if ok}
        refused = {node for node, ok in zip(written.nodes, written, strict=True) if not ok}
        assert len(merged) == BRANCHES - 1 and len(refused) <= 1 and not merged & refused
        after = taken(one, "after") + taken(two, "after")
        assert [(m.node, m.attempt) for m in after] == [("after", 1)]
        replay_agrees(one, run_id)
        assert str(two.runner.run(after[0].to_dict())) == "committed"
        view = one.orchestrator.get_run(run_id)
        assert view.status is RunStatus.SUCCEEDED
        assert view.state is not None
        assert {name: view.state.vars[name] for name in _NAMES} == dict.fromkeys(_NAMES, 1)
        seqs, rows = _seqs_and_rows(one, run_id)
        assert seqs == list(range(1, len(seqs) + 1))
        assert sorted(rows) == sorted([(name, 1, "succeeded") for name in [*_NAMES, "after"]])
        replay_agrees(one, run_id)


def test_a_merge_goes_only_onto_merges_and_never_decides_its_join(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = processes
    written = _merges(one, monkeypatch)
    run_id = one.orchestrator.submit("quorum_merging", {})
    v1, v2, v3, v4, v5, v6 = sorted(taken(one, "v"), key=lambda m: m.node)
    # Each planned on the run as submitted: v1 merges onto it.
    assert str(one.runner.run(v1.to_dict())) == "committed"
    assert written == [True]
    replay_agrees(one, run_id)
    # An audit event is a step of another kind: v2's merge, planned before it, is
    # refused; v2 plans again on the run as it is and merges then.
    _step_between(one, monkeypatch, lambda: one.orchestrator.steps.record(run_id, "note", {}))
    assert str(two.runner.run(v2.to_dict())) == "committed"
    assert written == [True, False, True]
    replay_agrees(one, run_id)
    # v4 plans a merge on two successes of a quorum of four; v3 merges before it is
    # written, and v4 would now reach the quorum: refused, it plans again and decides
    # the join the ordinary way.
    _step_between(one, monkeypatch, lambda: two.runner.run(v3.to_dict()))
    assert str(one.runner.run(v4.to_dict())) == "committed"
    assert written[3:] == [True, False]
    assert [m.node for m in taken(one, "after")] == ["after"]
    # The two still running finish after it (rest: finish): a decided join's branches
    # do not merge.
    for message in (v5, v6):
        assert str(two.runner.run(message.to_dict())) == "committed"
    assert written[5:] == []
    state = replay_agrees(one, run_id)
    assert state.joins["fan"].done


def test_a_branch_that_charges_is_not_merged(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = processes
    written = _merges(one, monkeypatch)
    run_id = one.orchestrator.submit("charged_merging", {})
    c1, c2, c3 = sorted(taken(one, "c"), key=lambda m: m.node)
    assert str(one.runner.run(c1.to_dict())) == "committed"
    assert str(two.runner.run(c2.to_dict())) == "committed"  # its spending: not merged
    assert written == [True]
    replay_agrees(one, run_id)
    assert str(one.runner.run(c3.to_dict())) == "committed"
    state = replay_agrees(one, run_id)
    assert state.spent == {"usd": 0.25}
    assert [m.node for m in taken(one, "after")] == ["after"]
