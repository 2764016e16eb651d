"""Patch markers on the embedded engine, its workers and scheduler running: an old run and
a new one take different paths, and their replays reproduce them; the answers of runs
whose state is not cached are restored from their events. The rule and the answers
themselves: tests/unit/test_patches.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.config import Settings
from cairn.engine.patches import answers_in_flight
from cairn.model.patches import BadPatchId
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.timetravel.replay import Replayer, Verdict
from tests.integration import patch_handlers

WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")
PATCH = patch_handlers.PATCH


def settled(runtime: Runtime, run_id: str, status: RunStatus, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while runtime.orchestrator.get_run(run_id).status is not status:
        assert time.monotonic() < deadline, runtime.orchestrator.get_run(run_id).status
        time.sleep(0.02)


def state_of(runtime: Runtime, run_id: str) -> RunState:
    state = runtime.orchestrator.get_run(run_id).state
    assert state is not None
    return state


def visits(runtime: Runtime, run_id: str, count: int, timeout_s: float = 20.0) -> None:
    """Waits until the run has priced ``count`` times and waits for a person again."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = state_of(runtime, run_id)
        if state.status is RunStatus.WAITING and len(state.vars.get("paths", [])) == count:
            return
        assert time.monotonic() < deadline, state
        time.sleep(0.02)


@pytest.fixture
def runtime(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Runtime]:
    cache = getattr(request, "param", 65_536)  # state_cache_bytes
    built = Runtime.build(
        Settings(
            home=tmp_path, workflows=[WORKFLOWS], scheduler_interval=0.02, state_cache_bytes=cache
        )
    )
    built.start_workers()
    built.start_scheduler()
    try:
        yield built
    finally:
        built.close()


def test_a_run_that_passed_the_point_keeps_the_old_path_and_replays_the_same(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    orchestrator = runtime.orchestrator
    monkeypatch.delenv(patch_handlers.FIX, raising=False)  # the code before the fix
    old = orchestrator.submit("patched_pricing", {"amount": 2.5})
    visits(runtime, old, 1)
    monkeypatch.setenv(patch_handlers.FIX, "1")  # the fix is deployed
    new = orchestrator.submit("patched_pricing", {"amount": 2.5})
    visits(runtime, new, 1)
    for run_id in (old, new):
        orchestrator.signal(run_id, "again")
        visits(runtime, run_id, 2)
    assert [f.to_dict() for f in answers_in_flight(orchestrator, "patched_pricing")] == [
        {
            "patch": PATCH,
            "answered_true": 1,
            "answered_false": 1,
            "unanswered": 0,
            "unanswered_before": 0,
            "needs_old_path": True,
            "old_path_runs": [old],
        }
    ]
    # An id no run in flight asked yet: each may have passed it on older code — unless
    # it started after the code with the patch was deployed.
    listed = answers_in_flight(orchestrator, "patched_pricing", 1, patches=["later-fix"])
    assert [found.patch for found in listed] == [PATCH, "later-fix"]
    unasked = listed[1]
    assert (unasked.unanswered, unasked.unanswered_before, unasked.needs_old_path) == (2, 2, True)
    assert unasked.old_path_runs == (old, new)
    since = answers_in_flight(orchestrator, "patched_pricing", patches=["later-fix"], since=0.0)[1]
    assert (since.unanswered, since.unanswered_before, since.needs_old_path) == (2, 0, False)
    assert answers_in_flight(orchestrator, "patched_pricing", 2) == []
    with pytest.raises(BadPatchId):
        answers_in_flight(orchestrator, "patched_pricing", patches=["no spaces"])
    for run_id in (old, new):
        orchestrator.signal(run_id, "approve")
        settled(runtime, run_id, RunStatus.SUCCEEDED)
    old_run, new_run = state_of(runtime, old), state_of(runtime, new)
    assert (old_run.vars["paths"], old_run.vars["total"]) == (["old", "old"], 2)
    assert (new_run.vars["paths"], new_run.vars["total"]) == (["new", "new"], 3)
    assert (old_run.patches, new_run.patches) == ({PATCH: False}, {PATCH: True})
    assert answers_in_flight(orchestrator, "patched_pricing") == []  # nothing in flight
    for run_id in (old, new):  # replayed on the code with the fix
        replay = Replayer(orchestrator, run_id).run()
        assert [s.verdict for s in replay.steps] == [Verdict.SAME, Verdict.SAME]


@pytest.mark.parametrize("runtime", [0], indirect=True)  # no state cached on a run's row
def test_the_answers_of_runs_whose_state_is_not_cached_are_restored(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(patch_handlers.FIX, "1")
    run_id = runtime.orchestrator.submit("patched_pricing", {"amount": 2.5})
    visits(runtime, run_id, 1)
    with runtime.store.reading() as tx:
        (listed,) = tx.patch_answers("default", "patched_pricing")
    assert (listed.id, listed.patches) == (run_id, None)
    (counted,) = answers_in_flight(runtime.orchestrator, "patched_pricing")
    assert (counted.answered_true, counted.answered_false, counted.needs_old_path) == (1, 0, False)
