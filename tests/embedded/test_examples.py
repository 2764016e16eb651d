"""The shipped agent examples run on the embedded runtime, on its worker threads, with
their real handlers (the calculator model played by the model stand-in, a server on a
thread of this process). Through the decider: tests/unit/test_examples.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.config import Settings
from cairn.engine.reads import RunView
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.testing.model_server import ModelServer
from examples import agent, calculator_model
from tests.support.in_process import EXAMPLES


@pytest.fixture
def calculator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ModelServer]:
    """The model stand-in playing the calculator model, where ``OpenAI()`` finds it."""
    with ModelServer(responder=calculator_model.respond) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setenv("AGENT_OUTBOX", str(tmp_path / "outbox"))
        monkeypatch.setattr(agent, "_clients", {})  # a client of this server's, not the last
        yield server


def test_agent_loop_runs_on_the_embedded_runtime(calculator: ModelServer, tmp_path: Path) -> None:
    """SQLite and worker threads: three tool turns, four model calls, the approval, one
    delivery."""
    settings = Settings(
        home=tmp_path / "home",
        workflows=[str(EXAMPLES / "agent_loop.yaml")],
        lease_ttl=3.0,
        heartbeat_interval=1.0,
    )
    runtime = Runtime.build(settings)
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit("agent_loop", {"question": "2 + 3 * 4 - 5"})
        view = _until(runtime, run_id, lambda v: v.status is not RunStatus.RUNNING)
        assert view.status is RunStatus.WAITING, view.reason
        assert calculator.count() == 4
        assert view.state is not None and view.state.vars["answer"] == "The answer is 15."
        assert not (tmp_path / "outbox").exists()  # nothing delivered before the approval
        runtime.orchestrator.signal(run_id, "approve", None)
        view = _until(runtime, run_id, lambda v: v.status.terminal)
        assert view.status is RunStatus.SUCCEEDED, view.reason
        (delivered,) = (tmp_path / "outbox").glob("*.json")
        assert json.loads(delivered.read_text())["answer"] == "The answer is 15."
        assert calculator.count() == 4
    finally:
        runtime.close()


def _until(runtime: Runtime, run_id: str, done: Callable[[RunView], bool]) -> RunView:
    deadline = time.monotonic() + 20
    while not done(view := runtime.orchestrator.get_run(run_id)):
        assert time.monotonic() < deadline, f"run {run_id} stuck: {view.status}"
        time.sleep(0.02)
    return view


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
