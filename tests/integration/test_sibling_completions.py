"""Branches of a fan-out that finish together: every result commits, and the join fires
once — whether the siblings complete in one process (they queue on the run's lock, and
whoever takes it writes those queued together, each planned on the one before) or in two
(the one-statement completion finds the run moved and tries again on the run read anew).
On PostgreSQL, and on the embedded default's SQLite."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cairn.definitions.builder import Workflow
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support.taking import run_together, taken, two_processes

BRANCHES = 8
# The branches' handlers all return at once: their completions race for the run row.
GATE = threading.Barrier(BRANCHES, timeout=30)


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


def branch(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    GATE.wait()
    return {ctx.node: ctx.attempt}


_NAMES = [f"b{index}" for index in range(1, BRANCHES + 1)]
siblings = Workflow("siblings", version=1)
siblings.task("first", noop, next="fan")
siblings.parallel("fan", _NAMES, next="after")
for _name in _NAMES:
    siblings.task(_name, branch)
siblings.task("after", noop, next="done")
siblings.end("done")


@pytest.fixture(params=["postgresql", "sqlite"])
def processes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[Runtime]]:
    url = request.getfixturevalue("database_url") if request.param == "postgresql" else None
    with two_processes(tmp_path / "home", __name__, url) as runtimes:
        yield runtimes


@pytest.mark.parametrize("spread", ["one process", "two processes"])
def test_siblings_finishing_together_all_commit_and_the_join_fires_once(
    processes: list[Runtime], spread: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = processes
    # The locking path records a result with finish_and_lock; the one-statement path
    # never does. None of the siblings may fall back to it.
    tx_class = type(one.store).tx_class
    locked: list[Any] = []
    finish_and_lock = tx_class.finish_and_lock

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        locked.append(args[0])
        return finish_and_lock(self, *args, **kwargs)

    monkeypatch.setattr(tx_class, "finish_and_lock", counted)
    # A completion that found the run moved gets the run as it is now from its own
    # statement on PostgreSQL: the only reads are each message's own — and not even
    # those of what a step in the same process dispatched (begun from its head).
    reads: list[Any] = []
    execution_and_run = tx_class.execution_and_run

    def read(self: Any, key: Any) -> Any:
        reads.append(key)
        return execution_and_run(self, key)

    monkeypatch.setattr(tx_class, "execution_and_run", read)
    postgresql = one.settings.database_url is not None and "postgresql" in str(
        one.settings.database_url
    )
    for _round in range(3):
        reads.clear()
        run_id = one.orchestrator.submit("siblings", {})
        (first,) = taken(one, "first")
        assert str(one.runner.run(first.to_dict())) == "committed"
        branches = taken(one, "b")
        assert sorted(m.node for m in branches) == _NAMES
        runners = [one, two] if spread == "two processes" else [one]
        pairs = [(runners[index % len(runners)], m) for index, m in enumerate(branches)]
        assert run_together(pairs) == ["committed"] * BRANCHES
        assert locked == []
        after = taken(one, "after") + taken(two, "after")
        assert [(m.node, m.attempt) for m in after] == [("after", 1)]  # the join, once
        assert str(two.runner.run(after[0].to_dict())) == "committed"
        if postgresql:  # each read a message's own, once; none of what one dispatched
            elsewhere = {m.node for runtime, m in pairs if runtime is two} | {"after"}
            assert len(reads) == len(set(reads))
            assert {key.node for key in reads} <= elsewhere
        view = one.orchestrator.get_run(run_id)
        assert view.status is RunStatus.SUCCEEDED
        assert view.state is not None
        assert {name: view.state.vars[name] for name in _NAMES} == dict.fromkeys(_NAMES, 1)
        events = one.orchestrator.events(run_id)
        dispatches_of_after = [
            e
            for e in events
            for command in e["outcome"].get("commands", [])
            if command["command"] == "Dispatch" and command["node"] == "after"
        ]
        assert len(dispatches_of_after) == 1
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        with one.store.reading() as tx:
            rows = tx.connection.execute(
                text("SELECT node, attempt, status FROM node_executions WHERE run_id = :r"),
                {"r": run_id},
            ).all()
        assert sorted(rows) == sorted(
            [(name, 1, "succeeded") for name in ["first", *_NAMES, "after"]]
        )


def _groups(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many steps each completion of siblings together wrote, or tried to."""
    tx_class = type(runtime.store).tx_class
    groups: list[int] = []

    def counted(write: Any) -> Any:
        def counting(self: Any, steps: Any) -> Any:
            groups.append(len(steps))
            return write(self, steps)

        return counting

    # Where branches merge (PostgreSQL), a group's branches merge, the last decides
    # the join: merge_steps writes both kinds.
    for name in ("complete_steps", "merge_steps"):
        monkeypatch.setattr(tx_class, name, counted(getattr(tx_class, name)))
    return groups


def _hold_the_first(runtime: Runtime, monkeypatch: pytest.MonkeyPatch, behind: int) -> None:
    """The next completion to take its run's lock writes its step (one statement, or a
    branch's merge) only once ``behind`` others are queued behind it: whoever takes the
    lock after it takes them all."""
    heads = runtime.orchestrator.steps.heads
    tx_class = type(runtime.store).tx_class
    holding = {"armed": True}

    def held(write: Any) -> Any:
        def held_first(self: Any, first: Any, *args: Any, **kwargs: Any) -> Any:
            if holding["armed"]:
                holding["armed"] = False
                run_id = first.run_id if hasattr(first, "run_id") else first.key.run_id
                deadline = time.monotonic() + 30
                while heads.waiting(run_id) < behind:
                    assert time.monotonic() < deadline, "the siblings did not queue"
                    time.sleep(0.005)
            return write(self, first, *args, **kwargs)

        return held_first

    monkeypatch.setattr(tx_class, "complete_step", held(tx_class.complete_step))
    monkeypatch.setattr(tx_class, "merge_step", held(tx_class.merge_step))


def test_siblings_queued_in_one_process_are_written_together(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, _two = processes
    groups = _groups(one, monkeypatch)
    run_id = one.orchestrator.submit("siblings", {})
    (first,) = taken(one, "first")
    assert str(one.runner.run(first.to_dict())) == "committed"
    _hold_the_first(one, monkeypatch, behind=BRANCHES - 1)
    branches = taken(one, "b")
    assert run_together([(one, m) for m in branches]) == ["committed"] * BRANCHES
    assert groups == [BRANCHES - 1]
    (after,) = taken(one, "after")  # the join, once: dispatched by the last written
    assert str(one.runner.run(after.to_dict())) == "committed"
    view = one.orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED
    assert view.state is not None
    assert {name: view.state.vars[name] for name in _NAMES} == dict.fromkeys(_NAMES, 1)
    events = one.orchestrator.events(run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert sorted(e["data"]["node"] for e in events if e["type"] == "node_succeeded") == sorted(
        ["first", *_NAMES, "after"]
    )


def test_siblings_written_together_on_a_run_moved_meanwhile_are_each_written_alone(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = processes
    run_id = one.orchestrator.submit("siblings", {})
    (first,) = taken(one, "first")
    assert str(one.runner.run(first.to_dict())) == "committed"
    *here, elsewhere = taken(one, "b")
    attempts = _groups(one, monkeypatch)
    optimistic = one.orchestrator.steps.optimistic
    plans = optimistic._plans

    def moved_once_planned(taken: Any) -> Any:
        # Planned and about to be written: the other process's sibling commits first.
        planned = plans(taken)
        if len(planned) > 1 and not attempts:
            monkeypatch.setattr(sys.modules[__name__], "GATE", threading.Barrier(1))
            assert run_together([(two, elsewhere)]) == ["committed"]
        return planned

    monkeypatch.setattr(optimistic, "_plans", moved_once_planned)
    _hold_the_first(one, monkeypatch, behind=len(here) - 1)
    monkeypatch.setattr(sys.modules[__name__], "GATE", threading.Barrier(len(here), timeout=30))
    # Six of the seven here are planned together, refused whole (the run moved), and
    # then each written alone on the run as it is now: all commit, the join fires once.
    results = run_together([(one, m) for m in here])
    assert results == ["committed"] * len(here)
    assert attempts == [len(here) - 1]
    (after,) = taken(one, "after") + taken(two, "after")
    assert str(one.runner.run(after.to_dict())) == "committed"
    view = one.orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED
    events = one.orchestrator.events(run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    succeeded = [e["data"]["node"] for e in events if e["type"] == "node_succeeded"]
    assert sorted(succeeded) == sorted(["first", *_NAMES, "after"])
