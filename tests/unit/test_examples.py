"""The shipped examples run, through the decider, with their real handlers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cairn.config import Settings
from cairn.definitions.catalog import discover
from cairn.definitions.loader import load_file
from cairn.model.definition import WorkflowDefinition
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.testing.driver import Driver
from tests.unit.conftest import EXAMPLES


def weekly_report() -> WorkflowDefinition:
    (found,) = discover([str(EXAMPLES / "weekly_report.py")])
    assert found.definition is not None, found.error
    return found.definition


def test_weekly_report_fans_out_to_three_sub_reports_and_publishes() -> None:
    driver = Driver(weekly_report())
    driver.start(week="2026-W47")
    driver.run("collect")
    assert sorted(driver.outstanding) == ["sales", "tickets", "traffic"]
    state = driver.run_to_end()
    assert state.status is RunStatus.SUCCEEDED
    assert "Sales: 6945 EUR over 5 days" in state.vars["report"]
    assert state.vars["published"] == "reports/2026-W47.txt"


def test_weekly_report_revises_a_report_without_data_a_bounded_number_of_times() -> None:
    driver = Driver(weekly_report())
    driver.start(week="2027-W01")
    state = driver.run_to_end()
    assert state.status is RunStatus.SUCCEEDED
    assert state.visits["compose"] == 3
    assert state.vars["revision"] == 3


@pytest.mark.parametrize(
    ("question", "answer", "thinks"),
    [("2 + 3", 5, 1), ("2 + 3 * 4 - 5", 15, 3), ("7", 7, 1), ("1 + 1 + 1 + 1 + 1 + 1 + 1", 7, 6)],
)
def test_agent_loop_answers_with_the_calculator(question: str, answer: int, thinks: int) -> None:
    driver = Driver(load_file(EXAMPLES / "agent_loop.yaml"))
    driver.start(question=question)
    state = driver.run_to_end()
    assert state.status is RunStatus.SUCCEEDED
    assert state.vars["answer"] == answer
    assert state.visits["think"] == thinks
    assert state.vars["transcript"][-1]["content"] == f"The answer is {answer}."


def test_agent_loop_is_bounded() -> None:
    driver = Driver(load_file(EXAMPLES / "agent_loop.yaml"))
    driver.start(question="1 + 1 + 1 + 1 + 1 + 1 + 1 + 1")  # 7 calculations, 6 thinks allowed
    state = driver.run_to_end()
    assert state.status is RunStatus.FAILED
    assert "max_visits" in (state.reason or "")


def test_agent_loop_gives_up_on_nonsense() -> None:
    driver = Driver(load_file(EXAMPLES / "agent_loop.yaml"))
    driver.start(question="what is love")
    state = driver.run_to_end()
    assert state.status is RunStatus.FAILED
    assert ("think", "route:default", "give_up") in driver.path


def test_the_research_agent_loops_inside_one_node_and_checkpoints_as_it_goes(
    tmp_path: Path,
) -> None:
    """An async agent loop in one node, on the embedded runtime: three searches, each a
    model turn and a tool answer in the conversation, then a summary, published."""
    settings = Settings(
        home=tmp_path,
        workflows=[str(EXAMPLES / "research_agent.yaml")],
        lease_ttl=3.0,
        heartbeat_interval=1.0,
    )
    runtime = Runtime.build(settings)
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit("research_agent", {})
        deadline = time.monotonic() + 20
        while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
            assert time.monotonic() < deadline, "the research agent did not finish"
            time.sleep(0.02)
        assert view.status is RunStatus.SUCCEEDED, view.reason
        assert view.state is not None
        assert view.state.vars["sources"] == ["durable execution", "checkpoint", "exactly once"]
        assert view.state.vars["summary"].startswith("Summary: A durable workflow")
        assert view.state.vars["published"].startswith("3 sources")
        roles = [m["role"] for m in view.state.messages]
        assert roles == ["user", *["assistant", "tool"] * 3, "assistant"]
    finally:
        runtime.close()
