"""The embedded default running: SQLite, the in-process broker and leases, worker
threads, one process."""

from __future__ import annotations

from pathlib import Path

from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support.embedded import settings, wait


def test_a_chain_runs_on_sqlite_with_worker_threads(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        run_id = runtime.orchestrator.submit("chain10", {"ledger": str(tmp_path / "ledger")})
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        lines = (tmp_path / "ledger").read_text().splitlines()
        assert [line.split()[1] for line in lines] == [f"n{i}" for i in range(1, 11)]
        events = runtime.orchestrator.events(run_id)
        assert [e["seq"] for e in events] == list(range(1, 12))
    finally:
        runtime.close()


def test_a_run_resumes_in_a_new_process_without_rerunning_finished_steps(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    first = Runtime.build(settings(tmp_path, continue_steps=False))  # a step a message
    run_id = first.orchestrator.submit("chain10", {"ledger": str(ledger)})
    # Run three steps by hand, then "crash": the fourth is dispatched, never executed.
    for _ in range(3):
        with first.store.reading() as tx:
            pending = [e for e in tx.executions_of(run_id) if e.status == "scheduled"]
        (execution,) = pending
        first.runner.run(
            {
                "run_id": run_id,
                "workflow": "chain10",
                "version": 1,
                "node": execution.node,
                "iteration": 1,
                "attempt": 1,
                "phase": "run",
            }
        )
    first.close()
    second = Runtime.build(settings(tmp_path))
    second.start_workers()
    second.start_scheduler()
    try:
        assert wait(second, run_id) is RunStatus.SUCCEEDED
    finally:
        second.close()
    nodes = [line.split()[1] for line in ledger.read_text().splitlines()]
    assert nodes == [f"n{i}" for i in range(1, 11)]  # each step once, in order
