"""The embedded default: SQLite, in-process broker and leases, one process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cairn.config import Settings
from cairn.errors import InvalidInput, UnknownWorkflow, WorkflowDefinitionError
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime

WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")


def settings(home: Path, **overrides: object) -> Settings:
    fast: dict[str, object] = {
        "workflows": [WORKFLOWS],
        "recovery_after": 0.5,
        "lease_ttl": 0.6,
        "heartbeat_interval": 0.2,
        "scheduler_interval": 0.05,
    }
    return Settings(home=home, **{**fast, **overrides})


def wait(runtime: Runtime, run_id: str, timeout_s: float = 20.0) -> RunStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = runtime.orchestrator.get_run(run_id).status
        if status.terminal:
            return status
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} did not finish")


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


def test_submit_refuses_unknown_workflows_and_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    try:
        with pytest.raises(UnknownWorkflow):
            runtime.orchestrator.submit("nope", {})
        with pytest.raises(InvalidInput, match="number"):
            runtime.orchestrator.submit("branchy", {"number": "three", "kind": "plain"})
        with pytest.raises(InvalidInput, match="not JSON"):
            runtime.orchestrator.submit("chain10", {"when": object()})
        with runtime.store.reading() as tx:
            assert tx.list_runs() == []
    finally:
        runtime.close()


def test_request_ids_make_submit_idempotent(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    try:
        first = runtime.orchestrator.submit("chain10", {}, request_id="r-1")
        assert runtime.orchestrator.submit("chain10", {}, request_id="r-1") == first
        registry = runtime.orchestrator.registry
        registry.register(registry.get("chain10"), "other")  # definitions are namespaced too
        assert (
            runtime.orchestrator.submit("chain10", {}, request_id="r-1", namespace="other") != first
        )
    finally:
        runtime.close()


def test_start_up_refuses_misspelt_definitions_naming_every_fault(tmp_path: Path) -> None:
    """``CAIRN_WORKFLOWS`` naming two broken files: one error names each file's unknown
    key with its suggestion, and nothing is registered."""
    step = "tests.integration.handlers:step"
    for name, typo in (("a", "retyr: {attempts: 2}"), ("b", "timout: 5m")):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nversion: 1\nstart: s\nnodes:\n"
            f"  s: {{handler: '{step}', next: done, {typo}}}\n  done: {{end: succeeded}}\n"
        )
    with pytest.raises(WorkflowDefinitionError) as caught:
        Runtime.build(settings(tmp_path / "home", workflows=[str(tmp_path)]))
    assert [(fault.code, fault.node) for fault in caught.value.faults] == [
        ("unknown_key", "s"),
        ("unknown_key", "s"),
    ]
    text = str(caught.value)
    assert "a.yaml: unknown key 'retyr' (did you mean 'retry'?)" in text
    assert "b.yaml: unknown key 'timout' (did you mean 'timeout'?)" in text
