"""Replay and fork on the embedded default (SQLite, worker threads), with a JSON-lines
file as the outside world, against runs the runtime's workers finished: replays and dry
runs that leave the world and the database as they were, a changed handler's divergence,
an unrecorded effect refused or stubbed, fork points, a live fork's lineage and fresh
keys, and the commands and their errors. The replay ledger, key scoping and the
decider's ``run_forked``: tests/unit/test_replay.py. The same on PostgreSQL with real
workers and a real HTTP service: tests/integration/test_replay.py."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from cairn.cli import replay as replay_cli  # noqa: F401 - registers the commands
from cairn.cli import runs as runs_cli  # noqa: F401 - registers cairn status
from cairn.cli.main import app, main
from cairn.config import Settings
from cairn.errors import ConfirmationRequired, InvalidInput
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.timetravel import register_stub
from cairn.timetravel.fork import Ending, NotACheckpoint, dry_run, fork_live, fork_point
from cairn.timetravel.ledger import Answer, unregister_stub
from cairn.timetravel.replay import Replayer, Verdict
from tests.integration import replay_handlers
from tests.integration.replay_handlers import world_calls
from tests.support.cli import REPO_ROOT, at_repo_root, flat

WORKFLOWS = REPO_ROOT / "tests" / "integration" / "workflows"
REPLAY_WORKFLOWS = [str(WORKFLOWS / "replay_shop.yaml"), str(WORKFLOWS / "replay_approval.yaml")]
TABLES = ("runs", "events", "snapshots", "node_executions", "effects", "artifacts", "outbox")


# -- runs on the embedded store -------------------------------------------------------------


def settings(home: Path) -> Settings:
    return Settings(home=home, workflows=REPLAY_WORKFLOWS, scheduler_interval=0.02)


def settled(runtime: Runtime, run_id: str, status: RunStatus, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while runtime.orchestrator.get_run(run_id).status is not status:
        assert time.monotonic() < deadline, runtime.orchestrator.get_run(run_id).status
        time.sleep(0.02)


def delivered(runtime: Runtime, timeout_s: float = 20.0) -> None:
    """Waits until every outbox row is marked sent: the embedded queue can run a message,
    and the steps after it, before its publisher marks the row — a later mark would read
    as a write the replay made."""
    deadline = time.monotonic() + timeout_s
    while True:
        with runtime.store.reading() as tx:
            if not tx.has_unsent(tx.now() + 1.0):  # any row, however new
                return
        assert time.monotonic() < deadline, "an outbox row was never marked sent"
        time.sleep(0.02)


def rows(runtime: Runtime) -> dict[str, list[Any]]:
    with runtime.store.reading() as tx:
        return {
            table: sorted(
                (tuple(row) for row in tx.connection.execute(text(f"SELECT * FROM {table}"))),
                key=repr,
            )
            for table in TABLES
        }


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replay")


@pytest.fixture(scope="module")
def shop(home: Path) -> Iterator[tuple[Runtime, dict[str, str]]]:
    """A finished order of five effects and an order parked at its approval."""
    runtime = Runtime.build(settings(home))
    runtime.start_workers()
    runtime.start_scheduler()
    world = str(home / "world.jsonl")
    try:
        made = {
            "order": runtime.orchestrator.submit("replay_shop", {"order": "o-1", "world": world}),
            "approval": runtime.orchestrator.submit(
                "replay_approval", {"order": "o-2", "world": world}
            ),
            "world": world,
        }
        settled(runtime, made["order"], RunStatus.SUCCEEDED)
        settled(runtime, made["approval"], RunStatus.WAITING)
        delivered(runtime)
        assert len(world_calls(world)) == 6
        yield runtime, made
    finally:
        runtime.close()


def test_a_replay_calls_nothing_writes_nothing_and_finds_each_step_the_same(
    shop: tuple[Runtime, dict[str, str]],
) -> None:
    runtime, made = shop
    before, calls = rows(runtime), world_calls(made["world"])
    report = Replayer(runtime.orchestrator, made["order"]).run()
    assert [(s.step.seq, s.step.node, s.verdict) for s in report.steps] == [
        (2, "reserve", Verdict.SAME),
        (3, "charge", Verdict.SAME),
        (4, "invoice", Verdict.SAME),
        (5, "ship", Verdict.SAME),
        (6, "notify", Verdict.SAME),
    ]
    assert not report.diverged and report.namespace == "default.replay"
    invoice = report.steps[2].executed
    assert invoice is not None and [u.answer for u in invoice.effects] == [Answer.RECORDED]
    assert report.steps[4].executed.progress == ({"done": 1, "total": 1, "message": "notified"},)  # type: ignore[union-attr]
    assert report.artifacts == ()  # the same content: the registration made then
    assert [s.step.seq for s in Replayer(runtime.orchestrator, made["order"]).run(5).steps] == [
        5,
        6,
    ]
    assert world_calls(made["world"]) == calls and rows(runtime) == before


def test_a_changed_handler_diverges_at_its_step(
    shop: tuple[Runtime, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, made = shop
    before = rows(runtime)
    monkeypatch.setattr(replay_handlers, "TAX_RATE", 0.2)
    report = Replayer(runtime.orchestrator, made["order"]).run()
    first = report.first_divergence
    assert first is not None and (first.step.seq, first.step.node) == (4, "invoice")
    assert [s.verdict for s in report.steps].count(Verdict.DIVERGED) == 1
    changes = {change.path: change for change in first.changes}
    assert (changes["output.total"].old, changes["output.total"].new) == (110.0, 120.0)
    assert "artifacts.invoice.sha256" in changes
    assert first.decider is None  # the run would have moved on the same way
    (put,) = report.artifacts
    assert put.uri.startswith("memory://default.replay/") and put.meta == {
        "replay": "default.replay"
    }
    assert rows(runtime) == before  # the changed artifact went to the sandbox


def test_an_unrecorded_effect_is_refused_or_answered_by_its_stub(
    shop: tuple[Runtime, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, made = shop
    calls = world_calls(made["world"])
    monkeypatch.setattr(replay_handlers, "AUDIT", True)
    report = Replayer(runtime.orchestrator, made["order"]).run()
    (refused,) = report.refused
    assert (refused.step.node, refused.verdict) == ("notify", Verdict.REFUSED)
    assert "effect audit.log 'o-1:audit' was never recorded; no replay stub: refused" in (
        refused.note
    )
    assert refused.executed is not None and refused.executed.status == "failed"
    register_stub("audit.log", replay_handlers.fake_audit)
    try:
        stubbed = Replayer(runtime.orchestrator, made["order"]).run(6)
    finally:
        unregister_stub("audit.log")
    (notify,) = stubbed.steps
    assert notify.verdict == Verdict.SAME and notify.executed is not None
    assert [u.answer for u in notify.executed.effects] == [Answer.RECORDED, Answer.STUBBED]
    assert world_calls(made["world"]) == calls


def test_dry_runs_end_park_or_refuse_and_touch_nothing(
    shop: tuple[Runtime, dict[str, str]],
) -> None:
    runtime, made = shop
    before, calls = rows(runtime), world_calls(made["world"])
    ended = dry_run(runtime.orchestrator, fork_point(runtime.orchestrator, made["order"], 3))
    assert (ended.ending, ended.state.status) == (Ending.ENDED, RunStatus.SUCCEEDED)
    assert [s.label for s in ended.steps] == ["invoice#2/1", "ship#1/1", "notify#1/1"]
    assert {use.answer for use in ended.effects} == {Answer.RECORDED}
    assert ended.to_dict()["lineage"] == {"parent_run_id": made["order"], "fork_seq": 3}

    parked = dry_run(runtime.orchestrator, fork_point(runtime.orchestrator, made["approval"], 1))
    assert parked.ending == Ending.PARKED and parked.state.status is RunStatus.WAITING
    assert [(a.node, a.signals) for a in parked.awaiting] == [("approval", ("approve", "reject"))]
    assert "approval#1 (approve, reject)" in parked.detail

    patched = fork_point(runtime.orchestrator, made["approval"], 1, {"order": "o-3"})
    assert patched.state.vars["order"] == "o-3"
    refused = dry_run(runtime.orchestrator, patched)
    assert refused.ending == Ending.REFUSED
    assert "shop.charge 'o-3:charge' was never recorded" in refused.detail
    capped = dry_run(
        runtime.orchestrator, fork_point(runtime.orchestrator, made["order"], 2), max_steps=1
    )
    assert capped.ending == Ending.STEP_CAP
    assert world_calls(made["world"]) == calls and rows(runtime) == before


def test_fork_points_are_checkpoints(shop: tuple[Runtime, dict[str, str]]) -> None:
    runtime, made = shop
    orchestrator = runtime.orchestrator
    with pytest.raises(NotACheckpoint, match="was succeeded: not resumable"):
        fork_point(orchestrator, made["order"], 6)
    with pytest.raises(InvalidInput, match="there is no seq 9"):
        fork_point(orchestrator, made["order"], 9)
    # A waiting run may be forked at its latest seq.
    last = orchestrator.get_run(made["approval"]).last_seq
    assert fork_point(orchestrator, made["approval"], last).state.status is RunStatus.WAITING
    with pytest.raises(ConfirmationRequired):
        fork_live(orchestrator, fork_point(orchestrator, made["order"], 3))


def test_a_live_fork_is_linked_to_its_parent_and_calls_under_fresh_keys(
    shop: tuple[Runtime, dict[str, str]],
) -> None:
    runtime, made = shop
    orchestrator = runtime.orchestrator
    calls = world_calls(made["world"])
    point = fork_point(orchestrator, made["order"], 4, {"amount": 250})
    fork_id = fork_live(orchestrator, point, confirm=True)
    settled(runtime, fork_id, RunStatus.SUCCEEDED)
    view = orchestrator.get_run(fork_id)
    assert (view.parent_run_id, view.fork_seq) == (made["order"], 4)
    assert view.namespace == "default" and view.result is not None
    assert view.result["amount"] == 250 and view.result["total"] == 110.0  # before the fork
    new = world_calls(made["world"])[len(calls) :]
    assert [(c["kind"], c["key"]) for c in new] == [
        ("ship", f"o-1:ship@fork:{fork_id}"),
        ("notify", f"o-1:notify@fork:{fork_id}"),
    ]
    events = orchestrator.events(fork_id)
    assert events[0]["type"] == "run_forked" and events[0]["data"]["patch"] == {"amount": 250}
    history = {e.type: e.summary for e in orchestrator_timeline(runtime, fork_id)}
    assert history["run_forked"] == f"forked from run {made['order']} at seq 4"
    # Its replay finds its own (scoped) effects: nothing is called.
    report = Replayer(orchestrator, fork_id).run()
    assert [s.verdict for s in report.steps] == [Verdict.SAME, Verdict.SAME]
    assert len(world_calls(made["world"])) == len(calls) + 2


def orchestrator_timeline(runtime: Runtime, run_id: str) -> Any:
    from cairn.timetravel.timeline import Timeline  # noqa: PLC0415

    return Timeline(runtime.orchestrator, run_id).history().events


# -- the command line ----------------------------------------------------------------------


@pytest.fixture
def cli_env(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    at_repo_root(monkeypatch, home=home, workflows=list(REPLAY_WORKFLOWS))
    return home


def test_cli_replay_and_fork(
    shop: tuple[Runtime, dict[str, str]], cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, made = shop
    runner = CliRunner()
    same = runner.invoke(app, ["replay", made["order"]])
    assert same.exit_code == 0, same.output
    assert "4 invoice#1/1 same 1 effect(s) recorded" in flat(same.output)
    assert "5 same, 0 diverged, 0 refused, 0 skipped" in flat(same.output)

    monkeypatch.setattr(replay_handlers, "TAX_RATE", 0.2)
    diverged = runner.invoke(app, ["replay", made["order"], "--json"])
    assert diverged.exit_code == 1, diverged.output
    report = json.loads(diverged.stdout)
    assert (
        report["first_divergence"]["seq"] == 4 and report["first_divergence"]["node"] == "invoice"
    )
    shown = flat(runner.invoke(app, ["replay", made["order"], "--from", "4"]).output)
    assert "4 invoice#1/1 DIVERGED" in shown and "~ output.total: 110.0 -> 120.0" in shown
    assert "first divergence: seq 4 invoice#1/1" in shown
    monkeypatch.setattr(replay_handlers, "TAX_RATE", 0.1)

    monkeypatch.setattr(replay_handlers, "AUDIT", True)
    refused = runner.invoke(app, ["replay", made["order"], "--from", "6"])
    assert refused.exit_code == 3 and "refused: seq 6 notify#1/1" in flat(refused.output)
    stubbed = runner.invoke(
        app,
        [
            "replay",
            made["order"],
            "--from",
            "6",
            "--stubs",
            "audit.log=tests.integration.replay_handlers:fake_audit",
        ],
    )
    unregister_stub("audit.log")
    assert stubbed.exit_code == 0, stubbed.output
    monkeypatch.setattr(replay_handlers, "AUDIT", False)

    dry = runner.invoke(app, ["fork", made["order"], "--at", "3", "--patch", '{"amount": 7}'])
    assert dry.exit_code == 0, dry.output
    assert f"dry run of a fork of {made['order']} at seq 3" in flat(dry.output)
    assert '"amount": 7' in dry.output and "ended: the run succeeded" in flat(dry.output)
    declined = runner.invoke(app, ["fork", made["order"], "--at", "3", "--live"], input="n\n")
    assert declined.exit_code == 1 and "nothing started" in flat(declined.output)
    live = runner.invoke(app, ["fork", made["order"], "--at", "5", "--live", "--yes", "--json"])
    assert live.exit_code == 0, live.output
    fork_id = json.loads(live.stdout)["id"]
    settled(runtime, fork_id, RunStatus.SUCCEEDED)
    status = runner.invoke(app, ["status", fork_id])
    assert f"forked from run {made['order']} at seq 5" in flat(status.output)


def test_cli_errors_exit_2_without_a_traceback(
    shop: tuple[Runtime, dict[str, str]],
    cli_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _runtime, made = shop
    for argv, message in (
        (["replay", "no-such-run"], "error: no run no-such-run"),
        (["replay", made["order"], "--from", "99"], "has events 1 to 6; there is no seq 99"),
        (["fork", "no-such-run", "--at", "2"], "error: no run no-such-run"),
        (["fork", made["order"], "--at", "0"], "there is no seq 0"),
        (["fork", made["order"], "--at", "6"], "was succeeded: not resumable"),
        (["fork", made["order"], "--at", "3", "--patch", "{oops"], "--patch is not JSON"),
        (["replay", made["order"], "--stubs", "no.such.module"], "replay stubs 'no.such.module'"),
    ):
        monkeypatch.setattr(sys, "argv", ["cairn", *argv])
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == 2, argv
        err = flat(capsys.readouterr().err)
        assert message in err, err
        assert "Traceback" not in err
