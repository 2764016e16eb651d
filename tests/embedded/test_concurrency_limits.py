"""Keyed concurrency limits on the embedded runtime (SQLite, worker threads, memory
slots): never more executions of a pool at once than its limit, the rest parked — no
thread held — and woken as slots free; every run ends, and a run cancelled while it
waits ends at once. (Pools, faults and waking, without threads:
tests/unit/test_concurrency_limits.py; on real services, with workers killed:
tests/acceptance/test_concurrency_limits.py.)"""

from __future__ import annotations

import time
from pathlib import Path

from cairn.config import Settings
from cairn.model.keys import ExecutionKey
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support import one_slot
from tests.unit.test_concurrency_limits import _most, _running, call_provider

WORKFLOW = f"""
name: limited
version: 1
start: call
concurrency: {{key: provider-key, limit: 3}}
nodes:
  call: {{handler: "{call_provider.__module__}:call_provider", next: done,
          concurrency: {{key: state.tenant, limit: 2}}}}
  done: {{end: succeeded}}
"""


def test_no_pool_has_more_executions_at_once_than_its_limit(tmp_path: Path) -> None:
    (tmp_path / "limited.yaml").write_text(WORKFLOW)
    settings = Settings(
        home=tmp_path / "home",
        workflows=[str(tmp_path / "limited.yaml")],
        lease_ttl=3.0,
        heartbeat_interval=1.0,
    )
    _running.clear()
    _most.clear()
    runtime = Runtime.build(settings, concurrency=8)
    runtime.start_workers()
    try:
        runs = [
            runtime.orchestrator.submit("limited", {"tenant": tenant})
            for tenant in ["a"] * 12 + ["b"] * 6
        ]
        deadline = time.monotonic() + 30
        for run_id in runs:
            while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
                assert time.monotonic() < deadline, f"{run_id} never ended"
                time.sleep(0.02)
            assert view.status is RunStatus.SUCCEEDED, view.reason
    finally:
        runtime.close()
    assert _most["a"] <= 2 and _most["b"] <= 2  # the tenant's limit
    assert _most["all"] <= 3  # the workflow's pool, shared by both tenants
    with runtime.store.reading() as tx:
        assert tx.waiting_pools() == []  # every wait ended


def test_a_run_cancelled_while_it_waits_for_a_slot_ends_at_once(tmp_path: Path) -> None:
    """One slot, held; the second run's node waits for it, parked. Cancelling the
    second run ends it now — its waiter is published and answered cancelled — not when
    the slot frees."""
    runtime = one_slot.one_slot_runtime(tmp_path)
    runtime.start_workers()
    orchestrator = runtime.orchestrator
    try:
        runs = [orchestrator.submit(one_slot.WORKFLOW, {}) for _ in range(2)]
        deadline = time.monotonic() + 20

        def parked() -> list[str]:
            """The run whose node waits for the slot: either may have taken it first."""
            with runtime.store.reading() as tx:
                return [r for r in runs if tx.parked(ExecutionKey(r, "hold", 1, "run"))]

        while not (found := parked()):
            assert time.monotonic() < deadline, "neither run waited"
            time.sleep(0.02)
        (waiter,) = found
        (holder,) = [r for r in runs if r != waiter]
        orchestrator.cancel(waiter, "not needed any more")
        while not (view := orchestrator.get_run(waiter)).status.terminal:
            assert time.monotonic() < deadline, "the cancelled waiter did not end"
            time.sleep(0.02)
        assert view.status is RunStatus.CANCELLED
        assert not orchestrator.get_run(holder).status.terminal  # the slot is still held
        one_slot.release.set()
        while not orchestrator.get_run(holder).status.terminal:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        one_slot.release.set()
        runtime.close()
