"""``cairn watch`` shows what a running node's model call is streaming, read from the
run's chunk log in real Redis (PostgreSQL holds the run): chunks appended through
``RedisLeases`` as a worker's publisher writes them, and a real streaming call through
``ctx.model`` against the model stand-in, cut short once and retried."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cairn.cli import watch
from cairn.cli.main import app
from cairn.client import Client
from cairn.lease.redis import RedisLeases
from cairn.model.statuses import RunStatus
from cairn.testing.model_server import Fault, ModelServer, Reply
from tests.support.cli import flat

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def services(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    database_url: str,
    redis_urls: tuple[str, str],
) -> str:
    """This process's settings (the CLI's too) point at the test's PostgreSQL and Redis;
    the in-process broker. Returns the leases' Redis URL."""
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    monkeypatch.setenv("CAIRN_DATABASE_URL", database_url)
    monkeypatch.setenv("CAIRN_REDIS_URL", redis_urls[1])
    monkeypatch.setenv("CAIRN_WORKFLOWS", str(ROOT / "tests/integration/workflows"))
    monkeypatch.delenv("CAIRN_BROKER_URL", raising=False)
    return redis_urls[1]


def chunk(
    call: int, offset: int, text: str, *, attempt: int = 1, done: bool = False
) -> dict[str, Any]:
    said = {"node": "read", "iteration": 1, "attempt": attempt, "call": call}
    return {**said, "offset": offset, "text": text, **({"done": True} if done else {})}


def test_watch_shows_the_tail_of_the_current_call_from_the_chunk_log(services: str) -> None:
    """No worker runs, so the node stays scheduled (running, as far as the run knows)
    while the test writes its chunk log: a first call, done; a second call of six lines,
    in two appends; and a late chunk of the first call. Then a retry of the second call."""
    client = Client()
    try:
        run_id = client.submit("paging", {"page_s": 0.0})
    finally:
        client.close()
    leases = RedisLeases.from_url(services)
    lines = [f"line {n} of the second answer\n" for n in range(1, 7)]
    second = "".join(lines)
    leases.append_chunks(run_id, [chunk(0, 0, "the first answer"), chunk(0, 16, "", done=True)])
    leases.append_chunks(run_id, [chunk(1, 0, second[:40])])
    leases.append_chunks(run_id, [chunk(1, 40, second[40:]), chunk(0, 16, " (late)")])
    runner = CliRunner()
    shown = runner.invoke(app, ["watch", run_id, "--interval", "0.05", "--timeout", "0.5"])
    assert shown.exit_code == 3, shown.output
    text = flat(shown.output)
    assert "read#1: waiting for a worker (no heartbeat)" in text
    assert "│ line 3 of the second answer │ line 4" in text
    assert "│ line 6 of the second answer" in text
    assert "line 2 of" not in text  # a tail of four rows
    assert "first answer" not in text and "(late)" not in text  # an older call's

    # A newer attempt replaces the call's text; what the cut one still sends is dropped.
    leases.append_chunks(run_id, [chunk(1, 0, "a retry, whole", attempt=2)])
    leases.append_chunks(run_id, [chunk(1, 200, "cut short", attempt=1)])
    shown = runner.invoke(app, ["watch", run_id, "--interval", "0.05", "--timeout", "0.3"])
    text = flat(shown.output)
    assert "│ a retry, whole" in text and "second answer" not in text and "cut" not in text
    hidden = runner.invoke(
        app, ["watch", run_id, "--interval", "0.05", "--timeout", "0.3", "--no-text"]
    )
    assert hidden.exit_code == 3 and "│" not in hidden.output and "read#1:" in hidden.output
    leases.client.close()


def test_watch_shows_a_streaming_calls_words_as_they_arrive(
    services: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real streamed call through ctx.model, cut after a few words (a transient
    failure), then retried and streamed whole, slowly: the frames ``cairn watch`` draws
    show the retry's words as they arrive (read on, refresh after refresh) and never the
    cut attempt's once the run has moved on to the retry; then the run ends, and so does
    the watch."""
    words = [f"word{n}" for n in range(40)]
    with ModelServer() as model:
        model.script(
            Fault(drop_after_chunks=4),
            Reply(
                text="\n".join(" ".join(words[n : n + 4]) for n in range(0, 40, 4)),
                chunk_delay_s=0.05,
            ),  # four words a line
        )
        monkeypatch.setenv("MODEL_URL", model.url)
        client = Client()
        try:
            client.runtime.start_workers()
            client.runtime.start_scheduler()
            run_id = client.submit("model_stream", {"turns": 1})
            frames = _frames(client, run_id)
            assert client.wait(run_id, 30).status is RunStatus.SUCCEEDED
        finally:
            client.close()
    cut = RedisLeases.from_url(services).read_chunks(run_id, "0")
    assert "".join(c["text"] for _id, c in cut if c["attempt"] == 1).startswith("this stream")
    # Once the run's state says attempt 2, the cut attempt's text is not shown: not even
    # while attempt 2 has said nothing yet.
    assert any(attempt == 2 for attempt, _frame in frames)
    assert not any("this stream" in frame for attempt, frame in frames if attempt >= 2)
    newest = [int(n) for _a, frame in frames for n in re.findall(r"word(\d+)", frame)[-1:]]
    assert newest == sorted(newest)
    assert len(set(newest)) >= 3  # over several refreshes, as the words came
    for _attempt, frame in frames:
        assert len([row for row in frame.splitlines() if "│" in row]) <= watch.TEXT_ROWS
    finished = CliRunner().invoke(app, ["watch", run_id, "--interval", "0.05"])
    assert finished.exit_code == 0, finished.output
    assert "│" not in finished.output  # the node has ended: its text with it


def _frames(client: Client, run_id: str) -> list[tuple[int, str]]:
    """What ``cairn watch`` draws at each refresh until the run ends, with the attempt
    of ``talk`` the run's state says runs."""
    orchestrator = client.runtime.orchestrator
    reports = watch._Reports(client.runtime.leases, run_id, text=True)
    frames = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = orchestrator.get_run(run_id)
        definition = orchestrator.registry.get(view.workflow, view.version)
        beats = reports.read(view)
        interval_s = client.settings.heartbeat_interval
        frame = watch._watch_view(view, definition, beats, [], interval_s, said=reports.said)
        drawn = io.StringIO()
        Console(file=drawn, width=100).print(frame)
        talk = view.state.nodes.get("talk") if view.state is not None else None
        attempt = talk.attempt if talk is not None else 0
        frames.append((attempt, drawn.getvalue()))
        if view.status.terminal:
            break
        time.sleep(0.05)
    return frames
