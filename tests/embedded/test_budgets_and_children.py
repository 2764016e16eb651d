"""Cost budgets (``ctx.charge``, split across branches) and child workflow runs end to
end on the embedded runtime's threads. The decider's rules, the definition's checks and
the step context: tests/unit/test_budgets_and_children.py."""

from __future__ import annotations

import time
from pathlib import Path

from cairn.model.statuses import NodeStatus, RunStatus
from cairn.runtime import Runtime
from tests.support.embedded import settings, wait


def test_budget_and_child_runs_on_the_embedded_runtime(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        orchestrator = runtime.orchestrator
        run_id = orchestrator.submit(
            "research_budget", {"calls": {"web": 50, "papers": 5, "code": 5, "write": 3}}
        )
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        state = orchestrator.get_run(run_id).state
        assert state is not None
        assert state.nodes["web"].spent == {"tokens": 900.0}
        assert state.spent == {"tokens": 900.0 + 500 + 500 + 300}

        trip_id = orchestrator.submit("trip", {"calls": {"search": 4}})
        assert wait(runtime, trip_id) is RunStatus.SUCCEEDED
        state = orchestrator.get_run(trip_id).state
        assert state is not None and state.vars["found"] == "LH 123"
        child = state.nodes["flights"].child
        assert child is not None
        assert orchestrator.get_run(child).status is RunStatus.SUCCEEDED

        # Cancel the parent while its child runs: the child is cancelled too.
        slow = orchestrator.submit(
            "trip", {"calls": {"search": 400}, "call_s": {"search": 0.05}, "tokens_per_call": 1}
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = orchestrator.get_run(slow).state
            if state is not None and "flights" in state.nodes:
                break
            time.sleep(0.05)
        orchestrator.cancel(slow, "never mind")
        assert wait(runtime, slow) is RunStatus.CANCELLED
        state = orchestrator.get_run(slow).state
        assert state is not None and state.nodes["flights"].child is not None
        assert wait(runtime, state.nodes["flights"].child) is RunStatus.CANCELLED
    finally:
        runtime.close()


def test_a_child_its_definition_refuses_fails_its_parents_node(tmp_path: Path) -> None:
    workflows = tmp_path / "workflows"
    workflows.mkdir()
    (workflows / "parent.yaml").write_text(
        "name: errand\nversion: 1\nstart: ask\nnodes:\n"
        "  ask: {child: {workflow: picky, input: [city]}, next: done}\n"
        "  done: {end: succeeded}\n"
    )
    (workflows / "picky.yaml").write_text(
        "name: picky\nversion: 1\nstart: done\n"
        "input: {type: object, required: [city], properties: {city: {type: string}}}\n"
        "nodes:\n  done: {end: succeeded}\n"
    )
    runtime = Runtime.build(settings(tmp_path, workflows=[str(workflows)]))
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        run_id = runtime.orchestrator.submit("errand", {"city": 7})
        assert wait(runtime, run_id) is RunStatus.FAILED
        view = runtime.orchestrator.get_run(run_id)
        assert view.state is not None
        ask = view.state.nodes["ask"]
        assert ask.status is NodeStatus.FAILED
        assert "the child run could not start: input does not match picky" in (ask.error or "")
        finished = [e for e in runtime.orchestrator.events(run_id) if e["type"] == "child_finished"]
        assert [e["data"]["status"] for e in finished] == ["failed"]
    finally:
        runtime.close()
