"""The store on real PostgreSQL: snapshots (the migrations are tested in tests/migration).

Snapshots are driven through the real orchestrator: a runtime without workers, whose
dispatched node executions the test completes itself, one at a time, so that it knows
exactly which event each snapshot follows.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from cairn.config import Settings
from cairn.decider.graph import decide
from cairn.model.definition import ErrorClass
from cairn.model.events import NodeFailed, NodeSucceeded, Phase, event_from_dict
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import STATE_FORMAT, RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.runtime import Runtime
from cairn.store.clauses import ACTIVE_EXECUTION
from cairn.store.schema import outbox, runs, snapshots
from tests.support.cluster import WORKFLOWS

CHAIN = [f"n{i}" for i in range(1, 11)]


# -- snapshots through the orchestrator ---------------------------------------------------


@pytest.fixture
def make_runtime(database_url: str, tmp_path: Path) -> Iterator[Callable[..., Runtime]]:
    """A runtime on the test's PostgreSQL database, with no workers: messages stay in the
    outbox, and the test completes the dispatched executions itself."""
    runtimes: list[Runtime] = []

    def build(**overrides: Any) -> Runtime:
        values: dict[str, Any] = {
            "database_url": database_url,
            "redis_url": None,
            "broker_url": None,
            "home": tmp_path / "home",
            "workflows": [str(WORKFLOWS)],
            "snapshot_every_events": 3,
            "snapshot_every_s": 3600.0,  # only the event count and the run's end count
        }
        runtime = Runtime.build(Settings(**{**values, **overrides}))
        runtimes.append(runtime)
        return runtime

    yield build
    for runtime in runtimes:
        runtime.close()


def test_a_published_message_is_marked_sent_by_the_next_write_a_submit_included(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Marks ride on the process's next write: unmarked, the relay would publish again
    every first message a client sent."""
    runtime = make_runtime()
    published: list[NodeMessage] = []

    class Taking:
        def publish(self, messages: Sequence[NodeMessage]) -> bool:
            published.extend(messages)
            return True

        def backlog(self, queue: str | None = None) -> int | None:
            return None

    runtime.orchestrator.publisher = Taking()
    first = runtime.orchestrator.submit("chain10", {})
    second = runtime.orchestrator.submit("chain10", {}, request_id="second")
    assert runtime.orchestrator.submit("chain10", {}, request_id="second") == second

    def sent() -> dict[str, Any]:
        with runtime.store.reading() as tx:
            return dict(tx.connection.execute(select(outbox.c.run_id, outbox.c.sent_at)).all())

    assert sent()[first] is not None
    assert sent()[second] is None  # the repeated submit wrote nothing, the mark neither
    runtime.orchestrator.flush_sent()  # what an idle process does within a second
    assert sent()[second] is not None
    assert [m.run_id for m in published] == [first, second]


def _active(runtime: Runtime, run_id: str) -> list[Any]:
    with runtime.store.reading() as tx:
        return [e for e in tx.executions_of(run_id) if e.status in ACTIVE_EXECUTION]


def _finish(
    runtime: Runtime, run_id: str, execution: Any, *, pad: int = 0, fail: bool = False
) -> None:
    """Report one execution's result, as a worker would."""
    view = runtime.orchestrator.get_run(run_id)
    message = NodeMessage(
        run_id,
        view.workflow,
        view.version,
        execution.node,
        execution.iteration,
        execution.attempt,
        Phase(execution.phase),
    )
    node, iteration, attempt = execution.node, execution.iteration, execution.attempt
    if fail:
        failed = NodeFailed(
            at=0.0,
            node=node,
            iteration=iteration,
            attempt=attempt,
            error_class=ErrorClass.PERMANENT,
            message="no such booking",
        )
        outcome = NodeOutcome(
            failed, NodeStatus.FAILED, error_class="permanent", error="no such booking"
        )
    else:
        output = {node: iteration, "last": node}
        succeeded = NodeSucceeded(
            at=0.0,
            node=node,
            iteration=iteration,
            attempt=attempt,
            output=output,
            messages=({"role": "tool", "content": f"{node} done" + "." * pad},),
            sessions={f"tool_{node}": {"cursor": iteration, "page": len(node)}},
        )
        outcome = NodeOutcome(succeeded, NodeStatus.SUCCEEDED, result=output, duration_s=0.01)
    completion = runtime.orchestrator.complete(message, outcome, "test-worker")
    assert completion.recorded, completion.reason


def _advance(runtime: Runtime, run_id: str, steps: int, **kwargs: Any) -> None:
    """Complete ``steps`` dispatched executions, one per event."""
    for _ in range(steps):
        (execution,) = _active(runtime, run_id)
        _finish(runtime, run_id, execution, **kwargs)


def _replayed(runtime: Runtime, run_id: str, upto: int | None = None) -> RunState:
    """The state from nothing but the event log: every event, folded from the start."""
    with runtime.store.reading() as tx:
        row = tx.run(run_id)
        definition = runtime.orchestrator.registry.get(row.workflow, row.version, tx)
        state = RunState(run_id, definition.name, definition.version)
        for event in tx.events_after(run_id, 0, upto):
            state = decide(definition, state, event_from_dict(event.data)).state
    return state


def _restored(runtime: Runtime, run_id: str, upto: int | None = None) -> RunState:
    return runtime.orchestrator.load(run_id, upto)[2]


def _snapshot_rows(runtime: Runtime, run_id: str) -> list[Any]:
    with runtime.store.reading() as tx:
        return list(
            tx.connection.execute(
                select(snapshots).where(snapshots.c.run_id == run_id).order_by(snapshots.c.seq)
            )
        )


def _body(row: Any) -> dict[str, Any]:
    raw = bytes(row.body)
    data: dict[str, Any] = json.loads(zlib.decompress(raw) if row.codec == "json+zlib" else raw)
    return data


def _rewrite_snapshot(runtime: Runtime, run_id: str, seq: int, body: dict[str, Any]) -> None:
    with runtime.store.transaction() as tx:
        changed = tx.connection.execute(
            update(snapshots)
            .where(snapshots.c.run_id == run_id, snapshots.c.seq == seq)
            .values(format=body["format"], codec="json", body=json.dumps(body).encode())
        )
        assert changed.rowcount == 1


def _cached(runtime: Runtime, run_id: str) -> dict[str, Any] | None:
    """The state cached on the run row (migration 0002), if any."""
    with runtime.store.reading() as tx:
        state: dict[str, Any] | None = tx.connection.execute(
            select(runs.c.state).where(runs.c.id == run_id)
        ).scalar_one()
    return state


def _drop_cache(runtime: Runtime, run_id: str) -> None:
    """As for a run last advanced before the cache existed: restore must use snapshots."""
    with runtime.store.transaction() as tx:
        tx.connection.execute(update(runs).where(runs.c.id == run_id).values(state=None))


def _last_seq(runtime: Runtime, run_id: str) -> int:
    return runtime.orchestrator.get_run(run_id).last_seq


def _assert_restores_like_replay(runtime: Runtime, run_id: str) -> None:
    """At every point of the history, snapshot + later events == all events from scratch."""
    last = _last_seq(runtime, run_id)
    for upto in range(1, last + 1):
        assert (
            _restored(runtime, run_id, upto).to_dict() == _replayed(runtime, run_id, upto).to_dict()
        ), f"state at seq {upto}"
    assert _restored(runtime, run_id).to_dict() == _replayed(runtime, run_id).to_dict()


@pytest.mark.parametrize("cache", ["cached", "uncached"])
def test_snapshots_every_k_events_and_at_the_end_restore_like_a_full_replay(
    cache: str, make_runtime: Callable[..., Runtime]
) -> None:
    runtime = make_runtime(
        snapshot_every_events=3, **({"state_cache_bytes": 0} if cache == "uncached" else {})
    )
    run_id = runtime.orchestrator.submit("chain10", {"topic": "fares"})
    assert _snapshot_rows(runtime, run_id) == []  # one event: nothing due yet
    _advance(runtime, run_id, 4)  # seq 5
    assert [row.seq for row in _snapshot_rows(runtime, run_id)] == [3]
    _assert_restores_like_replay(runtime, run_id)

    _advance(runtime, run_id, 6)  # n5..n10: seq 11, the run's end
    view = runtime.orchestrator.get_run(run_id)
    assert view.status is RunStatus.SUCCEEDED
    assert view.last_seq == 11
    rows = _snapshot_rows(runtime, run_id)
    assert [row.seq for row in rows] == [3, 6, 9, 11]
    with runtime.store.reading() as tx:
        assert tx.run(run_id).snapshot_seq == 11
    for row in rows:
        assert row.format == STATE_FORMAT
        assert row.codec == "json"  # all small
        body = _body(row)
        assert body["format"] == STATE_FORMAT
        # Each snapshot is exactly the state after its event.
        assert body == _replayed(runtime, run_id, row.seq).to_dict()
    if cache == "cached":
        assert _cached(runtime, run_id) == _replayed(runtime, run_id).to_dict()
    else:
        assert _cached(runtime, run_id) is None
    final = _restored(runtime, run_id)
    assert final.status is RunStatus.SUCCEEDED
    assert final.vars["last"] == "n10" and final.vars["topic"] == "fares"
    assert [m["content"] for m in final.messages] == [f"{n} done" for n in CHAIN]
    assert set(final.sessions) == {f"tool_{n}" for n in CHAIN}
    _assert_restores_like_replay(runtime, run_id)
    _drop_cache(runtime, run_id)  # and from the final snapshot alone
    assert _restored(runtime, run_id).to_dict() == _replayed(runtime, run_id).to_dict()


def test_a_run_that_fails_is_snapshotted_when_it_ends(
    make_runtime: Callable[..., Runtime],
) -> None:
    runtime = make_runtime(snapshot_every_events=3)
    run_id = runtime.orchestrator.submit("chain10", {})
    _advance(runtime, run_id, 3)  # n1..n3: seq 4
    (execution,) = _active(runtime, run_id)
    _finish(runtime, run_id, execution, fail=True)  # n4 fails for good: seq 5
    view = runtime.orchestrator.get_run(run_id)
    assert view.status is RunStatus.FAILED
    assert [row.seq for row in _snapshot_rows(runtime, run_id)] == [3, 5]
    _drop_cache(runtime, run_id)
    assert _restored(runtime, run_id).nodes["n4"].status is NodeStatus.FAILED
    _assert_restores_like_replay(runtime, run_id)


def test_large_snapshots_are_compressed_and_restore_identically(
    make_runtime: Callable[..., Runtime],
) -> None:
    threshold = 6_000
    runtime = make_runtime(
        snapshot_every_events=2,
        snapshot_compress_bytes=threshold,
        state_cache_bytes=threshold,  # the large states are not cached: snapshots it is
    )
    run_id = runtime.orchestrator.submit("chain10", {})
    _advance(runtime, run_id, 10, pad=1_000)  # each node adds ~1 kB of context
    assert runtime.orchestrator.get_run(run_id).status is RunStatus.SUCCEEDED
    assert _cached(runtime, run_id) is None
    rows = _snapshot_rows(runtime, run_id)
    assert [row.seq for row in rows] == [2, 4, 6, 8, 10, 11]
    for row in rows:
        body = _body(row)
        size = len(json.dumps(body, separators=(",", ":")).encode())
        assert row.codec == ("json+zlib" if size > threshold else "json"), (row.seq, size)
        if row.codec == "json+zlib":
            assert len(bytes(row.body)) < size / 5
        assert body == _replayed(runtime, run_id, row.seq).to_dict()
    assert {row.codec for row in rows} == {"json", "json+zlib"}  # both kinds were written
    _assert_restores_like_replay(runtime, run_id)


def test_compaction_keeps_the_newest_snapshots_and_restore_still_works(
    make_runtime: Callable[..., Runtime],
) -> None:
    keep = 3
    runtime = make_runtime(snapshot_every_events=1, snapshot_keep=keep)
    finished = runtime.orchestrator.submit("chain10", {})
    _advance(runtime, finished, 10)
    running = runtime.orchestrator.submit("chain10", {})
    _advance(runtime, running, 6)  # seq 7, still running
    small = runtime.orchestrator.submit("chain10", {})
    _advance(runtime, small, 2)  # seq 3: no more snapshots than it keeps
    runs_ = (finished, running, small)
    before = {run: [row.seq for row in _snapshot_rows(runtime, run)] for run in runs_}
    assert before == {finished: list(range(1, 12)), running: list(range(1, 8)), small: [1, 2, 3]}
    wanted = {run: _replayed(runtime, run).to_dict() for run in runs_}

    deleted = runtime.scheduler.compact()

    after = {run: [row.seq for row in _snapshot_rows(runtime, run)] for run in runs_}
    # The newest `keep` of each run survive; of the older ones, the first of each
    # stretch of 10 * snapshot_every_events events (here: 10) stays.
    assert after == {finished: [1, 9, 10, 11], running: [1, 5, 6, 7], small: [1, 2, 3]}
    assert deleted == sum(len(before[run]) - len(after[run]) for run in runs_)
    assert runtime.scheduler.compact() == 0  # nothing left to thin
    with runtime.store.reading() as tx:
        total = tx.connection.execute(select(func.count()).select_from(snapshots)).scalar_one()
    assert total == sum(map(len, after.values()))

    for run in runs_:
        _drop_cache(runtime, run)  # restore from what compaction left
        assert _restored(runtime, run).to_dict() == wanted[run]
        _assert_restores_like_replay(runtime, run)  # also between the kept snapshots
    _advance(runtime, running, 4)  # the thinned run carries on
    assert runtime.orchestrator.get_run(running).status is RunStatus.SUCCEEDED
    _assert_restores_like_replay(runtime, running)


def test_a_format_1_snapshot_restores_without_the_agent_context_and_the_run_continues(
    make_runtime: Callable[..., Runtime],
) -> None:
    runtime = make_runtime(snapshot_every_events=3)
    run_id = runtime.orchestrator.submit("chain10", {"topic": "fares"})
    _advance(runtime, run_id, 6)  # n1..n6: seq 7; the latest snapshot is at 6
    assert [row.seq for row in _snapshot_rows(runtime, run_id)] == [3, 6]
    original = _replayed(runtime, run_id).to_dict()
    assert len(original["messages"]) == 6 and len(original["sessions"]) == 6

    (row6,) = [row for row in _snapshot_rows(runtime, run_id) if row.seq == 6]
    old = {k: v for k, v in _body(row6).items() if k not in ("messages", "sessions", "artifacts")}
    _rewrite_snapshot(runtime, run_id, 6, {**old, "format": 1})
    _drop_cache(runtime, run_id)  # format 1 is older than the cache on the run row

    at_6 = _restored(runtime, run_id, 6)
    assert (at_6.messages, at_6.sessions, at_6.artifacts) == ([], {}, {})
    assert at_6.to_dict() == {
        **_replayed(runtime, run_id, 6).to_dict(),
        "messages": [],
        "sessions": {},
    }
    restored = _restored(runtime, run_id)
    # What format 1 never had is gone; what came after the snapshot (n6, at seq 7) is
    # replayed on top; everything else is as it was.
    assert restored.messages == [{"role": "tool", "content": "n6 done"}]
    assert restored.sessions == {"tool_n6": {"cursor": 1, "page": 2}}
    assert restored.artifacts == {}
    assert restored.extra == {}
    assert restored.to_dict() == {
        **original,
        "messages": restored.messages,
        "sessions": restored.sessions,
    }

    _advance(runtime, run_id, 4)  # n7..n10
    final = _restored(runtime, run_id)
    assert final.status is RunStatus.SUCCEEDED
    replayed = _replayed(runtime, run_id)
    assert final.vars == replayed.vars and final.vars["topic"] == "fares"
    assert final.visits == replayed.visits
    assert final.nodes == replayed.nodes
    assert [m["content"] for m in final.messages] == [f"n{i} done" for i in range(6, 11)]
    newest = _snapshot_rows(runtime, run_id)[-1]
    assert (newest.seq, newest.format) == (11, STATE_FORMAT)
    assert _body(newest) == final.to_dict()
    assert _body(newest)["format"] == STATE_FORMAT


def test_a_snapshot_from_a_newer_cairn_keeps_its_unknown_fields(
    make_runtime: Callable[..., Runtime],
) -> None:
    runtime = make_runtime(snapshot_every_events=3)
    run_id = runtime.orchestrator.submit("chain10", {})
    _advance(runtime, run_id, 6)  # seq 7; the latest snapshot is at 6
    original = _replayed(runtime, run_id).to_dict()
    (row6,) = [row for row in _snapshot_rows(runtime, run_id) if row.seq == 6]
    future = {"planner": {"budget": 3, "notes": ["keep me"]}}
    _rewrite_snapshot(runtime, run_id, 6, {**_body(row6), **future, "format": 3})
    _drop_cache(runtime, run_id)

    restored = _restored(runtime, run_id)
    assert restored.extra == future
    assert restored.to_dict() == {**original, **future}

    _advance(runtime, run_id, 2)  # n7, n8: seq 9, a snapshot is due
    rows = _snapshot_rows(runtime, run_id)
    assert [row.seq for row in rows] == [3, 6, 9]
    written = _body(rows[-1])
    assert written["planner"] == future["planner"]  # written back, not dropped
    assert written["format"] == rows[-1].format == STATE_FORMAT
    assert written == {**_replayed(runtime, run_id, 9).to_dict(), **future}
    cached = _cached(runtime, run_id)
    assert cached is not None and cached["planner"] == future["planner"]

    _advance(runtime, run_id, 2)  # to the end
    final = _restored(runtime, run_id)
    assert final.status is RunStatus.SUCCEEDED
    assert final.extra == future
    assert _body(_snapshot_rows(runtime, run_id)[-1])["planner"] == future["planner"]
    _drop_cache(runtime, run_id)
    assert _restored(runtime, run_id).extra == future
