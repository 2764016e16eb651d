"""A step continued in its worker (cairn.workers.step.continuation) is read from what the
commit before it left, not from the database, and its lease is claimed as the step before
it lets its own go: a chain of three runs on no read and four lease calls — its first
node begun from what the submission in this process left. What moved the run meanwhile —
another process's cancel between the commit and the next step — is still found by that
step's commit, whose statement is conditional on the run's seq. On PostgreSQL and on the
embedded default's SQLite, two runtimes on one database standing for two processes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cairn.definitions.builder import Workflow
from cairn.engine.executions import Begun, Executions
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.workers import runner as runner_module
from tests.support.taking import taken, two_processes

SEEN: list[tuple[str, int]] = []  # (node, the count in the state it was given)


def count(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    SEEN.append((ctx.node, int(state.get("count", 0))))
    return {"count": int(state.get("count", 0)) + 1}


three = Workflow("three", version=1)
three.task("first", count, next="second")
three.task("second", count, next="third")
three.task("third", count, next="done")
three.end("done")

forked = Workflow("forked", version=1)
forked.task("first", count, next="fan")
forked.parallel("fan", ["left", "middle", "right"], next="after")
for _branch in ("left", "middle", "right"):
    forked.task(_branch, count)
forked.task("after", count, next="done")
forked.end("done")


@pytest.fixture(params=["postgresql", "sqlite"])
def processes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[Runtime]]:
    url = request.getfixturevalue("database_url") if request.param == "postgresql" else None
    with two_processes(tmp_path / "home", __name__, url) as runtimes:
        runtimes[0].runner.continues = True  # as every runner does by default
        SEEN.clear()
        yield runtimes


def _reads(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes whose read went to the database."""
    tx_class = type(runtime.store).tx_class
    read = tx_class.execution_and_run
    nodes: list[str] = []

    def counted(self: Any, key: Any) -> Any:
        nodes.append(key.node)
        return read(self, key)

    monkeypatch.setattr(tx_class, "execution_and_run", counted)
    return nodes


def _lease_calls(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runner's lease calls, by name, in order (not those one makes of another)."""
    leases = runtime.runner.leases
    calls: list[str] = []
    inside: list[str] = []

    def counting(name: str) -> Any:
        call = getattr(leases, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            if not inside:
                calls.append(name)
            inside.append(name)
            try:
                return call(*args, **kwargs)
            finally:
                inside.pop()

        return counted

    for name in ("acquire", "release", "hand_on"):
        monkeypatch.setattr(leases, name, counting(name))
    return calls


def _ran(runtime: Runtime, run_id: str) -> dict[str, tuple[int, str]]:
    with runtime.store.reading() as tx:
        rows = tx.connection.execute(
            text("SELECT node, attempt, status FROM node_executions WHERE run_id = :r"),
            {"r": run_id},
        ).all()
    return {node: (attempt, status) for node, attempt, status in rows}


def test_a_continued_chain_reads_once_and_each_step_sees_the_one_before(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, _two = processes
    reads = _reads(one, monkeypatch)
    lease_calls = _lease_calls(one, monkeypatch)
    # Each step leaves the run's state on its row, continued or not: the cache readers
    # (and a step delivered after the chain) take it from.
    cached: list[bool] = []
    tx_class = type(one.store).tx_class
    complete_step = tx_class.complete_step

    def noted(self: Any, key: Any, **kwargs: Any) -> Any:
        cached.append(kwargs["writes"].run.state_json is not None)
        return complete_step(self, key, **kwargs)

    monkeypatch.setattr(tx_class, "complete_step", noted)
    run_id = one.orchestrator.submit("three", {})
    (first,) = taken(one, "first")
    continued: list[str] = []
    assert str(one.runner.run(first.to_dict(), continued)) == "committed"
    assert continued == ["second#1 committed", "third#1 committed"]
    # first begun from its submission's head, the continued two from their commits
    assert reads == []
    assert lease_calls == ["acquire", "hand_on", "hand_on", "release"]
    assert cached == [True, True, True]
    assert one.runner.leases.claims() == []  # every lease let go
    assert SEEN == [("first", 0), ("second", 1), ("third", 2)]
    view = one.orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED and view.state is not None
    assert view.state.vars["count"] == 3
    assert _ran(one, run_id) == dict.fromkeys(["first", "second", "third"], (1, "succeeded"))


class _Lost:
    """A hand-on whose answer never came back (the connection dropped as it was read)."""

    def taken(self) -> None:
        raise ConnectionError("the hand-on's answer was lost")


def test_a_hand_on_whose_answer_is_lost_leaves_the_next_step_to_claim_its_own_lease(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, _two = processes
    leases = one.runner.leases

    def lost(lease: Any, key: str, ttl_s: float, **kwargs: Any) -> _Lost:
        leases.release(lease, finished=True)  # the release went through; the claim did not
        return _Lost()

    monkeypatch.setattr(leases, "hand_on", lost)
    lease_calls = _lease_calls(one, monkeypatch)
    run_id = one.orchestrator.submit("three", {})
    (first,) = taken(one, "first")
    continued: list[str] = []
    assert str(one.runner.run(first.to_dict(), continued)) == "committed"
    assert continued == ["second#1 committed", "third#1 committed"]
    # Each continued step claimed its own lease instead, and nothing was left held.
    assert lease_calls == ["acquire", "hand_on", "acquire", "hand_on", "acquire", "release"]
    assert leases.claims() == []
    assert one.orchestrator.get_run(run_id).status is RunStatus.SUCCEEDED


def test_a_cancel_from_another_process_after_the_commit_is_found_by_the_next_commit(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = processes
    run_id = one.orchestrator.submit("three", {})
    begin_here = Executions.begin_here
    answered: list[Begun | None] = []

    def cancelled_meanwhile(self: Executions, message: Any, within_s: float) -> Begun | None:
        if message.node == "second":  # right after first's commit, before second's read
            two.orchestrator.cancel(run_id, "stop", actor="test")
            answered.append(begin_here(self, message, within_s))
            return answered[-1]
        return begin_here(self, message, within_s)

    monkeypatch.setattr(Executions, "begin_here", cancelled_meanwhile)
    (first,) = taken(one, "first")
    continued: list[str] = []
    assert str(one.runner.run(first.to_dict(), continued)) == "committed"
    assert answered and isinstance(answered[0], Begun)  # read from first's commit
    # second ran on what first's commit left, as if read a moment earlier; its commit
    # found the run moved, read it again and went no further: third never ran.
    assert continued == ["second#1 committed"]
    assert [node for node, _count in SEEN] == ["first", "second"]
    view = one.orchestrator.get_run(run_id)
    assert view.status in (RunStatus.CANCELLING, RunStatus.CANCELLED)
    assert "third" not in _ran(one, run_id)


def test_a_head_answers_only_a_fresh_first_attempt_of_a_run_committed_here(
    processes: list[Runtime],
) -> None:
    """What a head answers is what the database says; a later or resumed attempt, an
    execution dispatched longer ago than the window, a run no step of committed in this
    process, or one whose last step here went the locking way, is read from the database."""
    one, two = processes
    one.runner.continues = False
    run_id = one.orchestrator.submit("three", {})
    (first,) = taken(one, "first")
    executions = one.orchestrator.executions
    assert str(one.runner.run(first.to_dict())) == "committed"
    (second,) = taken(one, "second")
    answered = executions.begin_here(second, 30.0)
    from_database = executions.begin(second)
    assert isinstance(answered, Begun) and isinstance(from_database, Begun)
    assert answered.run.last_seq == from_database.run.last_seq
    assert answered.run.workflow_ref == from_database.run.workflow_ref
    assert answered.run.priority == from_database.run.priority
    assert answered.state == from_database.state
    head, stored = answered.execution, from_database.execution
    assert (head.status, head.attempt, head.fence, head.recoveries) == (
        stored.status,
        stored.attempt,
        stored.fence,
        stored.recoveries,
    )
    assert executions.begin_here(replace(second, attempt=2), 30.0) is None
    assert executions.begin_here(replace(second, resumed=True), 30.0) is None
    assert executions.begin_here(second, 0.0) is None  # dispatched longer ago than that
    assert executions.begin_here(replace(second, iteration=2), 30.0) is None
    assert two.orchestrator.executions.begin_here(second, 30.0) is None  # nothing there
    # A step of the run through the locking path here: the head kept is older than it.
    one.orchestrator.cancel(run_id, "stop", actor="test")
    assert executions.begin_here(second, 30.0) is None


def test_a_lease_handed_on_to_a_step_an_error_keeps_from_running_is_let_go(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """first commits and hands its lease on to second; then something fails before
    second runs: second's lease is let go at once (its row is the relay's), not left to
    lapse as if a worker had died holding it."""
    one, _two = processes
    run_id = one.orchestrator.submit("three", {})
    (first,) = taken(one, "first")

    def failing(*_args: Any) -> Any:
        raise RuntimeError("after the commit")

    monkeypatch.setattr(runner_module, "settle", failing)
    with pytest.raises(RuntimeError, match="after the commit"):
        one.runner.run(first.to_dict())
    assert _ran(one, run_id)["first"] == (1, "succeeded")
    assert "second" in _ran(one, run_id)  # dispatched, its outbox row unsent
    assert one.runner.leases.claims() == []  # nobody holds second: the relay may send it
    assert [node for node, _count in SEEN] == ["first"]


def test_of_a_fork_the_first_branch_is_continued_with_and_the_others_published_first(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = processes
    reads = _reads(one, monkeypatch)
    run_id = one.orchestrator.submit("forked", {})
    (first,) = taken(one, "first")
    published: list[str] = []
    publish = one.orchestrator.publisher.publish

    def noted(messages: Any) -> bool:
        published.extend(m.node for m in messages)
        if "left" in [node for node, _count in SEEN]:
            raise AssertionError("a branch ran before its siblings were published")
        return publish(messages)

    monkeypatch.setattr(one.orchestrator.publisher, "publish", noted)
    continued: list[str] = []
    assert str(one.runner.run(first.to_dict(), continued)) == "committed"
    assert continued == ["left#1 committed"]  # kept: no broker round trip, no read
    assert reads == []  # first begun from what its submission here left
    assert published == ["middle", "right"]  # the siblings, published before it ran
    branches = taken(one, "middle") + taken(one, "right")
    assert [str(two.runner.run(m.to_dict())) for m in branches] == ["committed"] * 2
    (after,) = taken(two, "after")  # the join, once, by the process that completed it
    assert str(two.runner.run(after.to_dict())) == "committed"
    view = one.orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED
    assert sorted(node for node, _count in SEEN) == sorted(
        ["first", "left", "middle", "right", "after"]
    )
    assert _ran(one, run_id) == dict.fromkeys(
        ["first", "left", "middle", "right", "after"], (1, "succeeded")
    )


def test_a_submission_leaves_a_head_only_where_nodes_run(processes: list[Runtime]) -> None:
    """A process that runs no nodes (an API server) keeps nothing of what it submits: its
    every submission would be memory held for nothing."""
    one, two = processes
    two.orchestrator.steps.starts_leave_heads = False
    here = one.orchestrator.submit("three", {})
    elsewhere = two.orchestrator.submit("three", {})
    assert one.orchestrator.steps.heads.current(here) is not None
    assert two.orchestrator.steps.heads.current(elsewhere) is None
    (first,) = [m for m in taken(two, "first") if m.run_id == elsewhere]
    assert two.orchestrator.executions.begin_here(first, 30.0) is None
