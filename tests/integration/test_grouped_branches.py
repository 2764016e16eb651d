"""A fork's branches grouped into fewer messages (cairn.engine.grouping), run by the worker
that takes the lead (cairn.workers.step.siblings), on PostgreSQL: two runtimes on one
database standing for two processes, whose messages the test takes and runs by hand. The
siblings run after the lead, each through every stage with its own lease and commit, its
outbox row marked sent by that commit; a slow lead's siblings are published on their own
(spilled); what a worker does not run of them — a malformed or ignored header, a step
that raised — is left to the rows: spilled, or relayed."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cairn.definitions.builder import Workflow
from cairn.engine.grouping import Grouping
from cairn.model.messages import NodeMessage, Sibling, siblings_header
from cairn.model.pauses import PauseKind
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.scheduler.relay import Relay
from cairn.workers import runner as runner_module
from cairn.workers.step import siblings as siblings_module
from tests.support.taking import taken, two_processes

BRANCHES = [f"b{i}" for i in range(1, 9)]
SLOW: dict[str, float] = {}  # node -> seconds it takes


def branch(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    time.sleep(SLOW.get(ctx.node, 0.0))
    return {ctx.node: ctx.iteration}


async def awaiting_branch(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {ctx.node: ctx.iteration}


forked = Workflow("forked8", version=1).parallel("fan", BRANCHES, next="done")
for _branch in BRANCHES:
    forked.task(_branch, branch)
forked.end("done")

# b3 is async: never grouped where it is known so, published alone where it was not.
mixed = Workflow("mixed8", version=1).parallel("fan", BRANCHES, next="done")
for _branch in BRANCHES:
    mixed.task(_branch, awaiting_branch if _branch == "b3" else branch)
mixed.end("done")


@pytest.fixture
def processes(database_url: str, tmp_path: Path) -> Iterator[list[Runtime]]:
    with two_processes(tmp_path / "home", __name__, database_url) as runtimes:
        for runtime in runtimes:  # as with a broker: a fork's branches four to a message
            orchestrator = runtime.orchestrator
            orchestrator.outbox.grouping = Grouping(
                4, orchestrator.registry.get, namespace_limits=False
            )
            # A loaded machine may take longer than the default's 50 ms over a group:
            # a test of what a group runs must not see its siblings spilled.
            runtime.runner.spill_after = 60.0
        SLOW.clear()
        yield runtimes


def _leads(runtime: Runtime) -> list[NodeMessage]:
    leads = sorted(taken(runtime, "b"), key=lambda m: m.node)
    assert [(m.node, [s.node for s in m.siblings]) for m in leads] == [
        ("b1", ["b3", "b5", "b7"]),
        ("b2", ["b4", "b6", "b8"]),
    ]
    return leads


def _sent(runtime: Runtime, run_id: str) -> dict[str, bool]:
    runtime.orchestrator.flush_sent()
    with runtime.store.reading() as tx:
        rows = tx.connection.execute(
            text("SELECT payload->>'node', sent_at IS NOT NULL FROM outbox WHERE run_id = :r"),
            {"r": run_id},
        ).all()
    return dict(rows)


def _deliver(runtime: Runtime, lead: NodeMessage, continued: list[str] | None = None) -> str:
    """``lead`` run by ``runtime``'s worker as Celery hands it over: its body, and its
    siblings in their header; how its own step ended."""
    return str(runtime.runner.run(lead.to_dict(), continued, siblings=siblings_header(lead)))


def test_the_lead_runs_its_siblings_after_it_each_with_its_own_commit(
    processes: list[Runtime],
) -> None:
    one, two = processes
    run_id = one.orchestrator.submit("forked8", {})
    first, second = _leads(one)
    assert _sent(one, run_id) == {"b1": True, "b2": True, **dict.fromkeys(BRANCHES[2:], False)}
    continued: list[str] = []
    handled = _deliver(one, first, continued)
    assert str(handled) == "committed"
    assert continued == ["b3#1 committed", "b5#1 committed", "b7#1 committed"]
    assert _deliver(two, second, []) == "committed"
    view = one.orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED and view.state is not None
    assert {b: view.state.vars[b] for b in BRANCHES} == dict.fromkeys(BRANCHES, 1)
    assert _sent(one, run_id) | _sent(two, run_id) == dict.fromkeys(BRANCHES, True)
    assert one.runner.leases.claims() == [] and two.runner.leases.claims() == []


class CountedLeases:
    """A worker's leases, each call counted by name."""

    def __init__(self, leases: Any) -> None:
        self.leases, self.calls = leases, Counter[str]()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.leases, name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return found(*args, **kwargs)

        return counted


def test_each_sibling_takes_its_lease_as_the_step_before_it_lets_its_own_go(
    processes: list[Runtime],
) -> None:
    """One round trip between two siblings, not two: the lead's lease handed on to b3,
    b3's to b5, b5's to b7 — each its own lease (its own key and fence), released last."""
    one, two = processes
    one.orchestrator.submit("forked8", {})
    first, second = _leads(one)
    counted = CountedLeases(one.runner.leases)
    one.runner.leases = counted
    continued: list[str] = []
    assert _deliver(one, first, continued) == "committed"
    assert continued == ["b3#1 committed", "b5#1 committed", "b7#1 committed"]
    assert (counted.calls["acquire"], counted.calls["hand_on"]) == (1, 3)
    assert counted.calls["release"] == 1  # b7's: no sibling left to hand it to
    stats = counted.leases.stats()  # the fleet's counters, added to once for the group
    assert (stats["branches_carried"], stats["branches_spilled"]) == (3, 0)
    assert counted.calls["add"] == 1
    assert _deliver(two, second, []) == "committed"
    assert counted.leases.claims() == [] and two.runner.leases.claims() == []


def test_a_lease_handed_to_a_sibling_done_elsewhere_is_let_go(
    processes: list[Runtime],
) -> None:
    one, two = processes
    one.orchestrator.submit("forked8", {})
    first, _second = _leads(one)
    for node in ("b3", "b5"):  # relayed, say, and run there
        done = next(s.of(first) for s in first.siblings if s.node == node)
        assert str(two.runner.run(done.to_dict())) == "committed"
    continued: list[str] = []
    _deliver(one, first, continued)
    assert continued == ["b3#1 already_done", "b5#1 already_done", "b7#1 committed"]
    assert one.runner.leases.claims() == [] and two.runner.leases.claims() == []


def test_a_slow_leads_siblings_are_spilled_to_run_elsewhere_meanwhile(
    processes: list[Runtime],
) -> None:
    one, two = processes
    one.runner.spill_after = 0.05
    SLOW["b1"] = 0.5
    run_id = one.orchestrator.submit("forked8", {})
    first, _second = _leads(one)
    continued: list[str] = []
    assert _deliver(one, first, continued) == "committed"
    assert continued == []  # all three were published while b1 ran
    stats = one.runner.leases.stats()
    assert (stats["branches_carried"], stats["branches_spilled"]) == (0, 3)
    spilled = taken(one, "b")
    assert sorted(m.node for m in spilled) == ["b3", "b5", "b7"]
    assert all(not m.siblings and m.outbox_id is not None for m in spilled)
    for message in spilled:  # another worker runs them, each its own message
        assert str(two.runner.run(message.to_dict())) == "committed"
    assert _sent(one, run_id)["b3"] is True


def test_a_sibling_done_elsewhere_is_skipped_and_the_rest_still_run(
    processes: list[Runtime],
) -> None:
    one, two = processes
    run_id = one.orchestrator.submit("forked8", {})
    first, _second = _leads(one)
    b3 = next(s.of(first) for s in first.siblings if s.node == "b3")
    assert str(two.runner.run(b3.to_dict())) == "committed"  # relayed, say, and run there
    continued: list[str] = []
    _deliver(one, first, continued)
    assert continued == ["b3#1 already_done", "b5#1 committed", "b7#1 committed"]
    assert _sent(one, run_id)["b7"] is True


def test_an_async_sibling_is_published_on_its_own_not_run_holding_the_slot(
    processes: list[Runtime],
) -> None:
    """Grouped by a process that could not tell b3 was async (as an API server groups):
    the worker that takes the lead publishes b3 alone, to be awaited on a loop."""
    one, _two = processes
    one.orchestrator.submit("mixed8", {})
    published = {m.node: m for m in taken(one, "b")}
    assert "b3" in published and not published["b3"].siblings  # known async here: alone
    first = published["b1"]
    b3 = Sibling.from_message(published["b3"])
    as_if_unknown = replace(first, siblings=(b3, *first.siblings))
    continued: list[str] = []
    _deliver(one, as_if_unknown, continued)
    assert "b3#1" not in " ".join(continued) and len(continued) == len(first.siblings)
    assert [m.node for m in taken(one, "b")] == ["b3"]


def test_a_step_that_raises_spills_the_siblings_it_carried(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, _two = processes
    one.orchestrator.submit("forked8", {})
    first, _second = _leads(one)

    def lost(*_args: Any, **_kwargs: Any) -> Any:
        raise ConnectionError("the database went away")

    monkeypatch.setattr(one.runner, "stages", lost)
    with pytest.raises(ConnectionError):
        _deliver(one, first)
    assert sorted(m.node for m in taken(one, "b")) == ["b3", "b5", "b7"]


def test_a_sibling_taken_as_its_lease_was_handed_on_is_published_if_not_run(
    processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lead's result is committed and b3 taken, its lease handed on; then the lead's
    step raises: b3 goes out on its own beside the siblings never taken, its lease let go."""
    one, _two = processes
    one.orchestrator.submit("forked8", {})
    first, _second = _leads(one)

    def lost(*_args: Any, **_kwargs: Any) -> Any:
        raise ConnectionError("the database went away")

    monkeypatch.setattr(runner_module, "settle", lost)
    with pytest.raises(ConnectionError):  # delivered as Celery would: in its node's scope
        _deliver(one, first)
    assert sorted(m.node for m in taken(one, "b")) == ["b3", "b5", "b7"]
    assert one.runner.leases.claims() == []


def test_a_lead_whose_queue_is_paused_leaves_its_siblings_held_in_the_outbox(
    processes: list[Runtime],
) -> None:
    one, _two = processes
    run_id = one.orchestrator.submit("forked8", {})
    first, _second = _leads(one)
    orchestrator = one.orchestrator
    orchestrator.pauses.pause(
        "default", PauseKind.QUEUE, one.settings.queue, reason="maintenance", actor="test"
    )
    orchestrator.pause_book.forget()  # seen at once, not within the view's second
    continued: list[str] = []
    assert _deliver(one, first, continued) == "paused"
    assert continued == [] and taken(one, "b") == []  # neither run nor published
    sent = _sent(one, run_id)
    assert [sent[b] for b in ("b3", "b5", "b7")] == [False] * 3  # the relay's on resuming


def test_siblings_a_worker_never_saw_are_relayed_from_their_rows(
    processes: list[Runtime],
) -> None:
    """A worker of an older version ignores the header; a malformed one is refused: the
    lead runs alone, and its siblings' rows — unsent, no lease held — are the relay's."""
    one, two = processes
    run_id = one.orchestrator.submit("forked8", {})
    first, second = _leads(one)
    assert str(one.runner.run(first.to_dict(), [])) == "committed"  # header ignored
    assert str(one.runner.run(second.to_dict(), [], siblings=[["b4", "one", 2]])) == "committed"
    relay = Relay(two.orchestrator, two.settings, two.scheduler.metrics, 0.0, two.leases)
    assert relay.relay() == 6
    relayed = taken(two, "b")
    assert sorted(m.node for m in relayed) == ["b3", "b4", "b5", "b6", "b7", "b8"]
    for message in relayed:
        assert str(two.runner.run(message.to_dict())) == "committed"
    assert one.orchestrator.get_run(run_id).status is RunStatus.SUCCEEDED


def test_the_spill_timer_publishes_what_is_left_once_the_group_is_due() -> None:
    published: list[str] = []
    group = Grouping(4, lambda _w, _v: forked.build(), namespace_limits=False)
    four = [NodeMessage("r1", "w", 1, b, 1, 1, outbox_id=int(b[1:])) for b in BRANCHES[:4]]
    (carrying,) = group(four)
    waiting = siblings_module.Siblings(carrying, lambda ms: published.extend(m.node for m in ms))
    timer = siblings_module.SpillTimer()
    timer.arm(waiting, 0.2)
    timer.arm(siblings_module.Siblings(carrying, lambda _ms: None), 5.0)  # later: waits
    assert waiting.take() is not None
    deadline = time.monotonic() + 5
    while not published and time.monotonic() < deadline:
        time.sleep(0.01)
    assert published == ["b3", "b4"] and waiting.take() is None
