"""``cairn watch``, in process, on the embedded default: it redraws a run as it moves, on
the wall clock, while the runtime's workers run it. The rest of the command line:
tests/unit/test_cli.py."""

from __future__ import annotations

import io
import socket
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cairn.cli import watch
from cairn.cli.main import app
from cairn.client import Client
from tests.support.cli import flat
from tests.unit import test_cli as unit

at_repo_root, runner = unit.at_repo_root, unit.runner


def test_watch_follows_a_run_to_its_end(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the embedded default: a finished run's last frame, a waiting run's explanation
    (then the timeout), and a recovery in the run's history."""
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    monkeypatch.setenv("CAIRN_WORKFLOWS", "tests/integration/workflows")
    client = Client()
    client.runtime.start_workers()
    done = client.submit("chain10", {"ledger": str(tmp_path / "ledger")})
    client.wait(done, 20)
    waiting = client.submit("approval", {"ledger": str(tmp_path / "ledger")})
    client.runtime.orchestrator.record(
        done,
        "recovered",
        {
            "node": "n4",
            "iteration": 1,
            "cause": "worker died",
            "from_seq": 4,
            "skipped_done": ["n1#1", "n2#1", "n3#1"],
        },
    )
    client.close()

    finished = runner.invoke(app, ["watch", done, "--interval", "0.05"])
    assert finished.exit_code == 0, finished.output
    text = flat(finished.output)
    assert f"{done} succeeded" in text and "10/10" in text
    assert "recovered n4#1 (worker died) from checkpoint at seq 4, skipped 3 finished" in text

    parked = runner.invoke(app, ["watch", waiting, "--interval", "0.05", "--timeout", "0.3"])
    assert parked.exit_code == 3
    assert "waiting for a signal (approve, reject)" in flat(parked.output)


def test_watch_shows_streamed_text_from_memory_leases_and_survives_redis_out_of_reach(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded default: the view reads this process's chunk log as it reads Redis's.
    With Redis out of reach (a port that refuses), the watch still follows the run and
    says what it lacks."""
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    monkeypatch.setenv("CAIRN_WORKFLOWS", "tests/integration/workflows")
    client = Client()
    try:
        run_id = client.submit("paging", {"ledger": str(tmp_path / "ledger")})  # no worker
        said = {"node": "read", "iteration": 1, "attempt": 1, "call": 0, "offset": 0}
        client.runtime.leases.append_chunks(run_id, [{**said, "text": "reading page one"}])
        reports = watch._Reports(client.runtime.leases, run_id, text=True)
        view = client.get_run(run_id)
        definition = client.runtime.orchestrator.registry.get(view.workflow, view.version)
        interval_s = client.settings.heartbeat_interval
        frame = watch._watch_view(
            view, definition, reports.read(view), [], interval_s, said=reports.said
        )
        drawn = io.StringIO()
        Console(file=drawn, width=100).print(frame)
        assert "read#1: waiting for a worker" in drawn.getvalue()
        assert "│ reading page one" in drawn.getvalue()
    finally:
        client.close()

    with socket.socket() as refusing:  # bound, never listening: connections are refused
        refusing.bind(("127.0.0.1", 0))
        monkeypatch.setenv("CAIRN_REDIS_URL", f"redis://127.0.0.1:{refusing.getsockname()[1]}/0")
        started = time.monotonic()
        parked = runner.invoke(app, ["watch", run_id, "--interval", "0.05", "--timeout", "0.5"])
    assert parked.exit_code == 3, parked.output
    assert parked.exception is None or isinstance(parked.exception, SystemExit)
    assert "no heartbeats nor streamed text: Redis unreachable" in flat(parked.output)
    assert time.monotonic() - started < 10
