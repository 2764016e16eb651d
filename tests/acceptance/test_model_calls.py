"""Durable model calls on real services, with the official openai SDK against the
project's model stand-in, which counts every request: a tool-using agent's calls are
made once each; replay, a dry-run fork and bisect make none; a changed prompt is reported at its
call; a worker killed during a call re-sends only that call; a 429's Retry-After is the
retry's delay; usage is charged, and a call past the budget is never sent."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from cairn.model.keys import ExecutionKey
from cairn.model.statuses import RunStatus
from cairn.store.records import ModelCallRecord
from cairn.testing.model_server import Fault, ModelServer, Reply, ToolCall
from tests.support.cluster import Cluster


@pytest.fixture
def model(cluster: Cluster) -> Iterator[ModelServer]:
    with ModelServer() as server:
        cluster.env["MODEL_URL"] = server.url
        yield server


def _six_turns(model: ModelServer) -> None:
    model.script(
        *(Reply(tool_calls=(ToolCall("lookup", {"word": f"w{turn}"}),)) for turn in range(5)),
        Reply(text="A cairn is a pile of stones."),
    )


def _turns(cluster: Cluster, run_id: str) -> list[str]:
    return [
        line.split()[4]
        for line in cluster.ledger.read_text().splitlines()
        if line.startswith(run_id)
    ]


def _charged_is_reported(cluster: Cluster, run_id: str, node: str) -> list[ModelCallRecord]:
    """The node's recorded calls, having checked that its tokens are the usage the
    stand-in reported for them: each answer counted once, however many executions read
    it back from the record."""
    view = cluster.wait(run_id)
    with cluster.client.runtime.store.reading() as tx:
        calls = tx.model_calls_of(ExecutionKey(run_id, node, 1, "run"))
    reported = sum(c.usage["total_tokens"] for c in calls if c.usage)
    assert view.state is not None
    assert (view.state.nodes[node].spent or {}).get("tokens") == reported > 0
    return calls


def test_an_agents_calls_are_made_once_and_replay_fork_and_bisect_make_none(
    cluster: Cluster, model: ModelServer
) -> None:
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    _six_turns(model)
    run_id = cluster.submit("model_agent")
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["answer"] == "A cairn is a pile of stones."
    assert model.count() == 6  # one request per turn
    assert [c.call_index for c in _charged_is_reported(cluster, run_id, "think")] == list(range(6))

    listed = cluster.cli("calls", run_id, "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    record = json.loads(listed.stdout)
    assert [c["call"] for c in record["calls"]] == list(range(6))
    assert record["calls"][-1]["text"] == "A cairn is a pile of stones."
    last_sent = [record["messages"][d] for d in record["calls"][-1]["messages"]]
    assert [m["role"] for m in last_sent[-2:]] == ["assistant", "tool"]
    shown = cluster.cli("calls", run_id, "--show", "5")
    assert shown.returncode == 0 and "A cairn is a pile of stones." in shown.stdout

    replayed = cluster.cli("replay", run_id, "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["diverged"] is False
    seq = max(e["seq"] for e in cluster.client.events(run_id) if e["type"] == "run_started")
    forked = cluster.cli("fork", run_id, "--at", str(seq), "--json")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    dry = json.loads(forked.stdout)
    assert (dry["ending"], dry["status"]) == ("ended", "succeeded"), dry
    bisected = cluster.cli(
        "bisect", run_id, "--check", "tests.integration.model_handlers:unanswered", "--json"
    )
    assert json.loads(bisected.stdout)["verdict"] == "found", bisected.stdout + bisected.stderr
    assert model.count() == 6  # zero requests from any of the three

    # The handler now asks with another system prompt: reported at call 0, never sent.
    changed = cluster.cli("replay", run_id, "--json", env={"AGENT_PROMPT": "Be brief."})
    report = json.loads(changed.stdout)
    assert report["diverged"] is True, report
    error = report["first_divergence"]["replayed"]["error"]
    assert "model call 0 diverged" in error and "messages differ from message 0" in error
    assert model.count() == 6

    # With a replay stub for the provider, the changed call is still the divergence — and
    # the stub answers it, so the replay goes on past it (to the answer); nothing is sent.
    stubbed = cluster.cli(
        "replay",
        run_id,
        "--json",
        "--stubs",
        "tests.integration.model_stubs",
        env={"AGENT_PROMPT": "Be brief."},
    )
    report = json.loads(stubbed.stdout)
    first = report["first_divergence"]
    assert report["diverged"] is True and first["node"] == "think", report
    assert (
        "model call 0 diverged" in first["note"] and "answered by its replay stub" in first["note"]
    )
    assert first["replayed"]["status"] == "succeeded"
    assert first["replayed"]["output"]["answer"] == "A cairn is a pile of stones."
    assert model.count() == 6


def test_a_checkpointing_agent_replays_the_same_and_forks_without_a_request(
    cluster: Cluster, model: ModelServer
) -> None:
    """An async agent node that checkpoints after each of its four model calls, then a
    sync node that checkpoints: its replay finds every step the same; a dry-run fork
    from before the agent (which starts it again, a new visit) answers every call from
    the parent's record and ends succeeded, like the run; one from before the second
    node too; one made to fail exits non-zero; bisect finds the answer's step. None of
    them sends a request."""
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    model.script(
        *(Reply(tool_calls=(ToolCall("lookup", {"word": f"w{turn}"}),)) for turn in range(3)),
        Reply(text="A cairn is a pile of stones."),
    )
    run_id = cluster.submit("checkpoint_agent")
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["checkpoints"] == 4
    assert model.count() == 4

    replayed = cluster.cli("replay", run_id, "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["counts"] == {"same": 2, "diverged": 0, "refused": 0, "skipped": 0}, report
    assert [s["replayed"]["checkpoints"] for s in report["steps"]] == [4, 1]

    events = cluster.client.events(run_id)
    started = max(e["seq"] for e in events if e["type"] == "run_started")
    thought = min(e["seq"] for e in events if e["type"] == "node_succeeded")
    for seq in (started, thought):
        forked = cluster.cli("fork", run_id, "--at", str(seq), "--json")
        assert forked.returncode == 0, forked.stdout + forked.stderr
        dry = json.loads(forked.stdout)
        assert (dry["ending"], dry["status"]) == ("ended", "succeeded"), dry
        assert dry["vars"]["wrapped"] == view.state.vars["wrapped"], dry
    failing = cluster.cli("fork", run_id, "--at", str(started), "--patch", '{"fail": true}')
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "the run failed" in failing.stdout
    bisected = cluster.cli(
        "bisect", run_id, "--check", "tests.integration.model_handlers:unanswered", "--json"
    )
    assert json.loads(bisected.stdout)["verdict"] == "found", bisected.stdout + bisected.stderr
    assert model.count() == 4  # not one request from the replay, the forks or bisect


def test_a_worker_killed_during_a_call_resends_only_that_call(
    cluster: Cluster, model: ModelServer
) -> None:
    doomed = cluster.worker(concurrency=1)
    cluster.consuming(doomed)
    cluster.scheduler()
    model.script(
        Reply(tool_calls=(ToolCall("lookup", {"word": "a"}),)),
        Reply(tool_calls=(ToolCall("lookup", {"word": "b"}),)),
        Fault(hang=True),  # the third call is out when the worker dies
        Reply(text="done"),
    )
    run_id = cluster.submit("model_agent")
    cluster.wait_for(lambda: model.count() == 3, 30, "the third call out")
    cluster.kill(doomed)
    cluster.consuming(cluster.worker(concurrency=1))
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert model.count() == 4  # calls 0 and 1 answered from the record; 2 sent again
    sent = [len(r.body["messages"]) for r in model.requests]
    assert sent == [2, 4, 6, 6]
    assert view.state is not None and view.state.vars["turns"] == 3
    _charged_is_reported(cluster, run_id, "think")  # the lost execution's charges, once


def test_a_429_retry_after_is_the_retrys_delay(cluster: Cluster, model: ModelServer) -> None:
    """The first turn is answered; the second is refused with Retry-After: 2. The retry
    is answered the first turn from the record — not charged for it again: the failed
    attempt's charges counted it — and sends the second once, 2 s later."""
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    model.script(
        Reply(tool_calls=(ToolCall("lookup", {"word": "cairn"}),)),
        Fault(status=429, retry_after_s=2),
        Reply(text="fine now"),
    )
    run_id = cluster.submit("model_agent")
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    _first, refused, second = model.requests  # one request per attempt: the SDK does not retry
    assert 1.8 <= second.at - refused.at < 4.0, second.at - refused.at  # not 100 ms of backoff
    _charged_is_reported(cluster, run_id, "think")


def test_a_call_past_the_budget_is_refused_before_it_is_sent(
    cluster: Cluster, model: ModelServer
) -> None:
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    # The first answer spends 390 of the node's 400 tokens: the second call's request
    # alone would take more than what is left.
    model.script(Reply(text="x " * 50, output_tokens=390))
    run_id = cluster.submit("model_turns", {"turns": 3})
    view = cluster.wait(run_id)
    assert view.status is RunStatus.FAILED
    assert view.reason is not None and "budget" in view.reason, view.reason
    assert model.count() == 1  # the second call was never sent


def test_a_worker_killed_mid_stream_resends_only_the_interrupted_call(
    cluster: Cluster, model: ModelServer
) -> None:
    doomed = cluster.worker(concurrency=1)
    cluster.consuming(doomed)
    cluster.scheduler()
    slow = " ".join(f"word{n}" for n in range(20))
    model.script(Reply(text="one"), Reply(text="two"), Reply(text=slow, chunk_delay_s=0.5))
    run_id = cluster.submit("model_stream", {"turns": 3})
    cluster.wait_for(lambda: model.count() == 3, 30, "the third call streaming")
    cluster.kill(doomed)  # kill -9 while the third call's chunks arrive
    model.script(Reply(text="three, at last"))
    cluster.consuming(cluster.worker(concurrency=1))
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["said"] == ["one", "two", "three, at last"]
    assert model.count() == 4  # calls 0 and 1 streamed again from the record; 2 re-sent
