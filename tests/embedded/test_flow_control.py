"""Singleton on the embedded runtime, its workers running the key's run to its end: skip
returns the unfinished run, and a new one starts once it ended. Debounce, and singleton
without workers: tests/unit/test_flow_control.py."""

from __future__ import annotations

import time

from cairn.model.starts import Singleton
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.unit import test_flow_control as unit

runtime = unit.runtime


def test_singleton_skip_returns_the_unfinished_run(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    runtime.start_workers()
    first = orchestrator.submit("approval", {}, singleton=Singleton("acct-1"))
    assert orchestrator.submit("approval", {}, singleton=Singleton("acct-1")) == first
    other = orchestrator.submit("approval", {}, singleton=Singleton("acct-2"))
    assert other != first
    _until(runtime, first, RunStatus.WAITING)
    assert orchestrator.submit("approval", {}, singleton=Singleton("acct-1")) == first
    orchestrator.signal(first, "reject")  # the run ends (failed)
    _until(runtime, first, RunStatus.FAILED)
    fresh = orchestrator.submit("approval", {}, singleton=Singleton("acct-1"))
    assert fresh != first  # the key's run ended: a new one starts
    assert orchestrator.submit("approval", {}, singleton=Singleton("acct-1")) == fresh


def _until(runtime: Runtime, run_id: str, status: RunStatus, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while runtime.orchestrator.get_run(run_id).status is not status:
        assert time.monotonic() < deadline, f"run {run_id} did not become {status.value}"
        time.sleep(0.02)
