"""Debounce and singleton on the embedded store, the debounce windows started by the
engine with a clock given by hand (the database's clock is only where a window's times
come from). Singleton skip, with workers running the key's run to its end:
tests/embedded/test_flow_control.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.errors import FlowConflict, InvalidInput
from cairn.model.starts import Debounce, Singleton, SingletonMode
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.records import DebounceRecord
from tests.support.embedded import settings


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    built = Runtime.build(settings(tmp_path))
    yield built
    built.close()


def window(runtime: Runtime, key: str) -> DebounceRecord | None:
    with runtime.store.transaction() as tx:
        return tx.lock_debounce("default", key)


def start_due(runtime: Runtime, now: float) -> int:
    with runtime.store.reading() as tx:
        due = tx.due_debounces(now, 100)
    return runtime.orchestrator.start_debounced(due, now)


def test_rapid_submissions_are_one_pending_run_started_with_the_last_input(
    runtime: Runtime,
) -> None:
    orchestrator = runtime.orchestrator
    debounce = Debounce("user-7", wait_s=30)
    ids = {orchestrator.submit("approval", {"n": n}, debounce=debounce) for n in range(5)}
    assert len(ids) == 1
    (run_id,) = ids
    run = orchestrator.get_run(run_id)
    assert run.status is RunStatus.PENDING and run.last_seq == 0
    held = window(runtime, "user-7")
    assert held is not None and held.run_id == run_id and held.submissions == 5
    assert held.due_at == pytest.approx(held.first_at + 30, abs=2)
    assert start_due(runtime, held.due_at - 0.1) == 0  # not before the quiet period
    assert orchestrator.get_run(run_id).status is RunStatus.PENDING
    assert start_due(runtime, held.due_at) == 1
    started = orchestrator.get_run(run_id)
    assert started.status is RunStatus.RUNNING
    assert orchestrator.events(run_id)[0]["data"]["input"] == {"n": 4}
    assert window(runtime, "user-7") is None
    assert start_due(runtime, held.due_at + 60) == 0  # started once
    # The window is closed: the next submission is a run of its own.
    later = orchestrator.submit("approval", {"n": 5}, debounce=debounce)
    assert later != run_id and orchestrator.get_run(later).status is RunStatus.PENDING


def test_max_wait_caps_how_long_submissions_postpone_the_start(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    debounce = Debounce("burst", wait_s=60, max_wait_s=90)
    orchestrator.submit("approval", {}, debounce=debounce)
    first = window(runtime, "burst")
    assert first is not None and first.deadline_at == pytest.approx(first.first_at + 90)
    orchestrator.submit("approval", {}, debounce=debounce)
    held = window(runtime, "burst")
    assert held is not None
    # Each submission moves the start to its time plus the wait — here past the cap.
    assert held.due_at <= held.first_at + 90
    assert held.due_at == pytest.approx(min(held.first_at + 90, held.first_at + 60), abs=2)


def test_a_debounce_key_holds_one_workflows_run(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    orchestrator.submit("approval", {}, debounce=Debounce("k", 10))
    with pytest.raises(FlowConflict, match="holds pending run"):
        orchestrator.submit("chain10", {}, debounce=Debounce("k", 10))
    with pytest.raises(InvalidInput, match="no request id"):
        orchestrator.submit("approval", {}, request_id="r", debounce=Debounce("k", 10))
    with pytest.raises(InvalidInput, match="not both"):
        orchestrator.submit("approval", {}, debounce=Debounce("k", 10), singleton=Singleton("k"))
    with pytest.raises(InvalidInput, match="at least its wait"):
        Debounce("k", 10, max_wait_s=5)
    with pytest.raises(InvalidInput, match="skip' or 'cancel"):
        Singleton("k", "maybe")  # type: ignore[arg-type]


def test_a_pending_run_can_be_cancelled_and_the_key_starts_afresh(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    debounce = Debounce("k", 10)
    pending = orchestrator.submit("approval", {}, debounce=debounce)
    orchestrator.cancel(pending, "not needed")
    assert orchestrator.get_run(pending).status is RunStatus.CANCELLED  # at once: nothing ran
    again = orchestrator.submit("approval", {"n": 1}, debounce=debounce)
    assert again != pending and orchestrator.get_run(again).status is RunStatus.PENDING
    held = window(runtime, "k")
    assert held is not None and held.run_id == again and held.submissions == 1
    assert start_due(runtime, held.due_at) == 1
    assert orchestrator.get_run(again).status is RunStatus.RUNNING
    assert orchestrator.get_run(pending).status is RunStatus.CANCELLED


def test_singleton_cancel_replaces_the_unfinished_run(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    first = orchestrator.submit("approval", {}, singleton=Singleton("acct"))
    second = orchestrator.submit("approval", {}, singleton=Singleton("acct", SingletonMode.CANCEL))
    assert second != first
    assert orchestrator.get_run(first).status in (RunStatus.CANCELLING, RunStatus.CANCELLED)
    assert "replaced by run" in str(orchestrator.get_run(first).state.cancel)  # type: ignore[union-attr]
    assert orchestrator.get_run(second).status is RunStatus.RUNNING
    # A request id still names one run: the same submission again is that run.
    third = orchestrator.submit(
        "approval", {}, request_id="r-1", singleton=Singleton("acct", SingletonMode.CANCEL)
    )
    again = orchestrator.submit(
        "approval", {}, request_id="r-1", singleton=Singleton("acct", SingletonMode.CANCEL)
    )
    assert again == third and orchestrator.get_run(third).status is RunStatus.RUNNING
