"""``examples/agent_loop`` on real services, as the README runs it: PostgreSQL, Redis,
Celery workers and the scheduler as processes of their own; the official ``openai`` SDK,
pointed by ``OPENAI_BASE_URL`` at the model stand-in playing
``examples/calculator_model.py``, which counts every request; the outbox a directory.

A question answered through N tool turns makes exactly N+1 model requests, then waits
for a person (a replay sends none): ``cairn signal RUN approve`` delivers the answer once,
``reject`` delivers nothing; a worker killed after the delivery, before the ledger heard
of it, does not deliver twice; the loop is bounded; a question that is not a sum gives
up."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cairn.engine.reads import RunView
from cairn.model.statuses import RunStatus
from cairn.testing.model_server import ModelServer
from examples import calculator_model
from tests.support.cluster import Cluster
from tests.support.services import ROOT

EXAMPLE = ROOT / "examples" / "agent_loop.yaml"


@dataclass
class Agent:
    cluster: Cluster
    model: ModelServer
    outbox: Path

    def submit(self, question: str) -> str:
        # Through the client, not cluster.submit: the example's input schema accepts the
        # question alone, not the ledger path the test workflows are given.
        return self.cluster.client.submit("agent_loop", {"question": question})

    def until_settled(self, run_id: str) -> RunView:
        """The run once it is waiting for a person, or over."""
        views: list[RunView] = []

        def settled() -> bool:
            views.append(view := self.cluster.client.get_run(run_id))
            return view.status is RunStatus.WAITING or view.status.terminal

        self.cluster.wait_for(settled, 60, f"run {run_id} to wait or end")
        return views[-1]

    def delivered(self) -> list[dict[str, Any]]:
        if not self.outbox.exists():
            return []
        return [json.loads(path.read_text()) for path in sorted(self.outbox.glob("*.json"))]

    def effects(self, run_id: str) -> list[dict[str, Any]]:
        listed = self.cluster.cli("effects", run_id, "--json")
        assert listed.returncode == 0, listed.stderr
        return list(json.loads(listed.stdout))


@pytest.fixture
def agent(cluster: Cluster, tmp_path: Path) -> Iterator[Agent]:
    outbox = tmp_path / "outbox"
    with ModelServer(responder=calculator_model.respond) as model:
        # The example's own definition; the integration workflows hold another agent_loop.
        cluster.settings = cluster.settings.model_copy(update={"workflows": [str(EXAMPLE)]})
        cluster.env.update(
            {
                "CAIRN_WORKFLOWS": str(EXAMPLE),
                "OPENAI_BASE_URL": model.openai_base_url,
                "OPENAI_API_KEY": "test",
                "AGENT_OUTBOX": str(outbox),
            }
        )
        yield Agent(cluster, model, outbox)


def _start(agent: Agent) -> None:
    agent.cluster.consuming(agent.cluster.worker())
    agent.cluster.scheduler()


def test_an_answer_through_three_tool_turns_waits_for_approval_and_is_delivered_once(
    agent: Agent,
) -> None:
    _start(agent)
    run_id = agent.submit("2 + 3 * 4 - 5")
    view = agent.until_settled(run_id)
    assert view.status is RunStatus.WAITING, view.reason
    assert agent.model.count() == 4  # three tool turns and the answer
    bodies = [request.body for request in agent.model.requests]
    assert all(body["tools"][0]["function"]["name"] == "calculate" for body in bodies)
    assert [len(body["messages"]) for body in bodies] == [2, 4, 6, 8]
    assert view.state is not None
    assert view.state.vars["answer"] == "The answer is 15."
    roles = [message["role"] for message in view.state.messages]
    assert roles == ["system", "user", *["assistant", "tool"] * 3, "assistant"]
    assert [m["content"] for m in view.state.messages if m["role"] == "tool"] == ["5", "20", "15"]
    waiting = agent.cluster.cli("waiting", "--json")
    assert run_id in waiting.stdout, waiting.stdout + waiting.stderr
    assert agent.delivered() == []  # nothing leaves before a person says so

    approved = agent.cluster.cli("signal", run_id, "approve")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    view = agent.cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    (delivered,) = agent.delivered()
    assert (delivered["run"], delivered["answer"]) == (run_id, "The answer is 15.")
    (effect,) = agent.effects(run_id)
    assert (effect["key"], effect["status"], effect["calls"]) == (f"{run_id}:answer", "applied", 1)
    assert agent.model.count() == 4  # the approval and the delivery ask the model nothing

    # A replay runs every handler again, answered from the record: no request, no delivery.
    replayed = agent.cluster.cli("replay", run_id, "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["diverged"] is False
    assert agent.model.count() == 4
    assert len(agent.delivered()) == 1


def test_a_rejected_answer_is_not_delivered(agent: Agent) -> None:
    _start(agent)
    run_id = agent.submit("2 + 3")
    assert agent.until_settled(run_id).status is RunStatus.WAITING
    assert agent.model.count() == 2
    rejected = agent.cluster.cli("signal", run_id, "reject")
    assert rejected.returncode == 0, rejected.stdout + rejected.stderr
    view = agent.cluster.wait(run_id)
    assert view.status is RunStatus.FAILED
    assert view.reason == "reached end node 'rejected'", view.reason
    assert agent.delivered() == []
    assert agent.effects(run_id) == []


def test_a_worker_killed_after_delivering_does_not_deliver_twice(agent: Agent) -> None:
    """effect.after_call: the answer is in the outbox, the worker dies before the ledger
    records it. The recovered node asks the outbox (the example's adapter) and finds it:
    no second delivery."""
    doomed = agent.cluster.spawn(
        "worker",
        "--concurrency=1",
        "--pool=threads",  # the fault point kills the whole process, not a pool child
        env={"CAIRN_FAULT_POINTS": "effect.after_call"},
    )
    agent.cluster.consuming(doomed)
    agent.cluster.scheduler()
    run_id = agent.submit("6 * 7")
    assert agent.until_settled(run_id).status is RunStatus.WAITING
    assert agent.cluster.cli("signal", run_id, "approve").returncode == 0
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    assert len(agent.delivered()) == 1
    assert [e["status"] for e in agent.effects(run_id)] == ["intent"]

    agent.cluster.consuming(agent.cluster.worker())
    view = agent.cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    (delivered,) = agent.delivered()
    assert delivered["answer"] == "The answer is 42."
    (effect,) = agent.effects(run_id)
    assert (effect["status"], effect["calls"]) == ("applied", 1)  # backfilled, not called
    assert view.state is not None and view.state.vars["delivered"].endswith(":answer.json")


def test_the_loop_is_bounded(agent: Agent) -> None:
    _start(agent)
    run_id = agent.submit("1 + 1 + 1 + 1 + 1 + 1 + 1")  # six tool turns; think may run six times
    view = agent.cluster.wait(run_id)
    assert view.status is RunStatus.FAILED
    assert view.reason is not None and "max_visits" in view.reason, view.reason
    assert agent.model.count() == 6  # the seventh turn was never asked for
    assert view.state is not None and view.state.vars["tool_calls"] == 6
    assert agent.delivered() == []


def test_a_question_that_is_not_a_sum_gives_up(agent: Agent) -> None:
    _start(agent)
    run_id = agent.submit("what is love")
    view = agent.cluster.wait(run_id)
    assert view.status is RunStatus.FAILED
    assert view.reason == "reached end node 'give_up'", view.reason
    assert agent.model.count() == 1
    assert view.state is not None
    assert view.state.vars["refusal"] == calculator_model.REFUSAL
    assert agent.delivered() == []
