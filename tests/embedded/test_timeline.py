"""The run timeline on the embedded default (SQLite, worker threads): history, state at a
seq, diff and bisect of runs the runtime's workers finished, compared with what the live
run wrote and its handlers were given, and the commands. The pure parts:
tests/unit/test_timeline.py."""

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

from cairn.cli import timeline as timeline_cli  # noqa: F401 - registers the commands
from cairn.cli.main import app, main
from cairn.client import Client
from cairn.config import Settings
from cairn.errors import RunNotFound
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.sql import Tx
from cairn.timetravel.bisection import BadPredicate, Verdict
from cairn.timetravel.diff import plain
from cairn.timetravel.steps import digest
from cairn.timetravel.timeline import SeqOutOfRange, Timeline
from tests.integration import timeline_handlers
from tests.support.cli import REPO_ROOT, at_repo_root, flat
from tests.unit.test_timeline import CHECK

WORKFLOWS = REPO_ROOT / "tests" / "integration" / "workflows"
TIMELINE_WORKFLOWS = [str(WORKFLOWS / "timeline_loop.yaml"), str(WORKFLOWS / "timeline_order.yaml")]
SNAPSHOT_EVERY = 4


def settings(home: Path) -> Settings:
    return Settings(
        home=home,
        workflows=TIMELINE_WORKFLOWS,
        scheduler_interval=0.02,
        snapshot_every_events=SNAPSHOT_EVERY,
        snapshot_keep=1,
    )


def note_live_states(runtime: Runtime) -> None:
    """Keep every state the live run writes to its row (the cache each step hands on to
    the next), by seq: a trigger, so nothing in cairn is asked or changed."""
    with runtime.store.engine.begin() as connection:
        connection.execute(text("CREATE TABLE live_states (run_id TEXT, seq INTEGER, state TEXT)"))
        for when in ("INSERT", "UPDATE"):
            connection.execute(
                text(
                    f"CREATE TRIGGER note_live_state_{when.lower()} AFTER {when} ON runs "
                    "WHEN NEW.state IS NOT NULL BEGIN "
                    "INSERT INTO live_states VALUES (NEW.id, NEW.last_seq, NEW.state); END"
                )
            )


def live_states(runtime: Runtime, run_id: str) -> dict[int, dict[str, Any]]:
    states: dict[int, dict[str, Any]] = {}
    with runtime.store.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT seq, state FROM live_states WHERE run_id = :run ORDER BY rowid"),
            {"run": run_id},
        )
        for seq, state in rows:
            value = json.loads(state)
            assert states.setdefault(seq, value) == value, f"two states written for seq {seq}"
    return states


def finish(runtime: Runtime, run_id: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while runtime.orchestrator.get_run(run_id).status is not RunStatus.SUCCEEDED:
        assert time.monotonic() < deadline, runtime.orchestrator.get_run(run_id).status
        time.sleep(0.02)


def observed(path: Path, run_id: str) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [entry for entry in map(json.loads, lines) if entry["run_id"] == run_id]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("timeline")


@pytest.fixture(scope="module")
def runs(home: Path) -> Iterator[tuple[Runtime, dict[str, str]]]:
    """One embedded deployment with two finished runs: an order (a retried step) and a
    64-step loop whose 37th visit overdraws the account. Both are read, never written,
    by the tests."""
    runtime = Runtime.build(settings(home))
    note_live_states(runtime)
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        made = {
            "order": runtime.orchestrator.submit("timeline_order", {"observed": str(home / "obs")}),
            "loop": runtime.orchestrator.submit(
                "timeline_loop", {"balance": 100, "bad_at": 37, "observed": str(home / "obs")}
            ),
        }
        for run_id in made.values():
            finish(runtime, run_id)
        yield runtime, made
    finally:
        runtime.close()


# -- a finished run -----------------------------------------------------------------------


def test_state_at_every_seq_equals_what_the_live_run_wrote(
    runs: tuple[Runtime, dict[str, str]],
) -> None:
    """Each step hands the state it decided on to the next (the run row's cache): a
    trigger kept all of them. Rebuilt from snapshots and the log, every seq matches —
    and still does once compaction thinned the snapshots."""
    runtime, made = runs
    for run_id in made.values():
        live = live_states(runtime, run_id)
        timeline = Timeline(runtime.orchestrator, run_id)
        last_seq = runtime.orchestrator.get_run(run_id).last_seq
        assert sorted(live) == list(range(1, last_seq + 1))
        with runtime.store.reading() as tx:
            assert len(tx.snapshot_seqs(run_id)) > 1  # restores start from snapshots
        for seq in range(1, last_seq + 1):
            assert plain(timeline.state_at(seq)) == live[seq], seq
        assert plain(timeline.state_at()) == live[last_seq]
    runtime.scheduler.compact()  # (if the running scheduler has not done it already)
    with runtime.store.reading() as tx:
        assert tx.snapshot_seqs(made["loop"]) == [SNAPSHOT_EVERY, 10 * SNAPSHOT_EVERY, 65]
    loop = Timeline(runtime.orchestrator, made["loop"])
    live = live_states(runtime, made["loop"])
    for seq in (1, 2, 17, 40, 64, 65):
        assert plain(loop.state_at(seq)) == live[seq], seq


def test_history_lists_each_step_with_what_its_handler_was_given(
    runs: tuple[Runtime, dict[str, str]], home: Path
) -> None:
    runtime, made = runs
    found = Timeline(runtime.orchestrator, made["order"]).history()
    assert (found.workflow, found.status, found.last_seq) == ("timeline_order", "succeeded", 7)
    assert [(s.seq, s.label, s.status, s.marks) for s in found.steps] == [
        (2, "prepare#1/1", "succeeded", ()),
        (3, "fetch#1/1", "failed", ("retrying",)),
        (5, "fetch#1/2", "succeeded", ("retry",)),
        (6, "price#1/1", "succeeded", ()),
        (7, "finish#1/1", "succeeded", ()),
    ]
    assert [(e.seq, e.type) for e in found.events] == [(1, "run_started"), (4, "timer_fired")]
    failed, retried = found.steps[1], found.steps[2]
    assert failed.error == "transient: TransientError: upstream 503"
    assert failed.outputs_digest is None
    assert (failed.dispatched_seq, retried.dispatched_seq) == (2, 4)
    # The retried attempt's row is the worker's; the failed attempt's was overwritten.
    assert (failed.duration_from, retried.duration_from) == ("log", "worker")
    assert all(s.duration_s is not None and s.duration_s >= 0 for s in found.steps)
    given = {
        (e["node"], e["iteration"], e["attempt"]): e["inputs_digest"]
        for e in observed(home / "obs", made["order"])
    }
    assert {s.execution[:3]: s.inputs_digest for s in found.steps} == given
    prepared = {"order": {"id": 42, "items": ["tea", "cups"]}, "total": 0}
    assert found.steps[0].outputs_digest == digest(prepared)


def test_diff_shows_the_fields_a_step_changed(runs: tuple[Runtime, dict[str, str]]) -> None:
    runtime, made = runs
    timeline = Timeline(runtime.orchestrator, made["order"])
    changes = {c.path: c for c in timeline.diff(4, 5)}  # fetch's second attempt succeeds
    assert changes["vars.order.items[2]"].to_dict() == {
        "path": "vars.order.items[2]",
        "change": "added",
        "new": "pot",
    }
    assert (changes["vars.unit"].kind, changes["vars.unit"].new) == ("added", 7)
    assert (changes["nodes.fetch.status"].old, changes["nodes.fetch.status"].new) == (
        "scheduled",
        "succeeded",
    )
    assert changes["nodes.price"].kind == "added"
    assert "vars.total" not in changes
    backwards = {c.path: c for c in timeline.diff(5, 4)}
    assert backwards["vars.unit"].kind == "removed"
    assert timeline.diff(3, 3) == []


def test_bisect_finds_the_seeded_bad_step_of_64_in_at_most_7_checks(
    runs: tuple[Runtime, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, made = runs
    ranges: list[tuple[int, int | None]] = []
    events_after = Tx.events_after

    def counted(self: Tx, run_id: str, seq: int, upto: int | None = None) -> list[Any]:
        if run_id == made["loop"]:  # (the runtime's scheduler thread reads too)
            ranges.append((seq, upto))
        return events_after(self, run_id, seq, upto)

    monkeypatch.setattr(Tx, "events_after", counted)
    found = Timeline(runtime.orchestrator, made["loop"]).bisect(timeline_handlers.balance_ok)
    assert found.verdict is Verdict.FOUND
    assert len(found.checks) <= 7
    assert found.step is not None and found.step.label == "tick#37/1"
    # Good before the culprit, bad from it on: each check judged the state after a step.
    assert all(c.ok is (c.seq < found.step.seq) for c in found.checks)
    assert found.input_state is not None and found.input_state.vars["balance"] == 100 + 36 * 10
    assert found.output == {"count": 37, "balance": 100 + 37 * 10 - 1000}
    assert {c.path for c in found.changes} >= {"vars.balance", "vars.count"}
    # One read of the step list, then each restore replays only the events since the
    # snapshot it starts from: never the run from its beginning.
    # (Compaction, in the test above, left one snapshot per stretch of 10 x 4 events.)
    whole, *restores = ranges
    assert whole == (0, 65)
    assert restores
    for seq, upto in restores:
        assert seq > 0 and upto is not None and upto - seq < 10 * SNAPSHOT_EVERY


def test_bisect_says_when_no_step_is_to_blame(runs: tuple[Runtime, dict[str, str]]) -> None:
    runtime, made = runs
    timeline = Timeline(runtime.orchestrator, made["loop"])
    fine = timeline.bisect(timeline_handlers.always)
    assert fine.verdict is Verdict.NEVER_FAILS and fine.step is None
    assert len(fine.checks) <= 7 and fine.checks[-1].seq == 65
    bad = timeline.bisect(timeline_handlers.never)
    assert bad.verdict is Verdict.FAILS_AT_START
    assert bad.checks[-1].label == "start" and bad.checks[-1].seq == 1
    with pytest.raises(BadPredicate, match=r"KeyError on the state at seq \d+"):
        timeline.bisect(timeline_handlers.broken)


def test_unknown_runs_and_seqs_out_of_range_are_refused(
    runs: tuple[Runtime, dict[str, str]],
) -> None:
    runtime, made = runs
    with pytest.raises(RunNotFound):
        Timeline(runtime.orchestrator, "no-such-run").history()
    timeline = Timeline(runtime.orchestrator, made["order"])
    for seq in (0, -1, 8):
        with pytest.raises(SeqOutOfRange, match="has events 1 to 7"):
            timeline.state_at(seq)
    with pytest.raises(SeqOutOfRange):
        timeline.diff(1, 99)


# -- the command line ----------------------------------------------------------------------


@pytest.fixture
def cli_env(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    at_repo_root(monkeypatch, home=home, workflows=list(TIMELINE_WORKFLOWS))
    return home


def test_cli_history_state_and_diff(runs: tuple[Runtime, dict[str, str]], cli_env: Path) -> None:
    _runtime, made = runs
    runner = CliRunner()
    shown = runner.invoke(app, ["history", made["order"]])
    assert shown.exit_code == 0, shown.output
    text_ = flat(shown.output)
    assert "timeline_order@1 succeeded: 5 step(s) in 7 event(s)" in text_
    assert "fetch#1/1 failed" in text_ and "retrying; transient: TransientError" in text_
    assert "fetch#1/2 succeeded" in text_ and "retry" in text_
    assert "4 · timer retry:fetch:1:1 fired" in text_
    as_json = json.loads(runner.invoke(app, ["history", made["order"], "--json"]).stdout)
    assert [s["seq"] for s in as_json["steps"]] == [2, 3, 5, 6, 7]

    state = runner.invoke(app, ["state", made["order"], "--at", "5", "--json"])
    assert state.exit_code == 0, state.output
    assert json.loads(state.stdout)["vars"]["unit"] == 7
    human = runner.invoke(app, ["state", made["order"], "--at", "5"])
    assert "at seq 5: running" in flat(human.output)
    assert "price#1 scheduled (attempt 1)" in flat(human.output)

    changed = runner.invoke(app, ["diff", made["order"], "--from", "4", "--to", "5"])
    assert changed.exit_code == 0, changed.output
    assert "+ vars.unit: 7" in changed.output
    assert '~ nodes.fetch.status: "scheduled" -> "succeeded"' in changed.output
    listed = json.loads(
        runner.invoke(app, ["diff", made["order"], "--from", "4", "--to", "5", "--json"]).stdout
    )
    assert {"path": "vars.unit", "change": "added", "new": 7} in listed


def test_cli_bisect_prints_checks_and_the_step_and_exits_1_without_culprit(
    runs: tuple[Runtime, dict[str, str]], cli_env: Path
) -> None:
    _runtime, made = runs
    runner = CliRunner()
    found = runner.invoke(app, ["bisect", made["loop"], "--check", CHECK])
    assert found.exit_code == 0, found.output
    text_ = flat(found.output)
    assert text_.count("check seq") <= 7
    assert "first bad step" in text_ and "seq 38 tick#37/1 node_succeeded" in text_
    assert '"balance": 460' in text_ and '"balance": -530' in text_
    as_json = json.loads(
        runner.invoke(app, ["bisect", made["loop"], "--check", CHECK, "--json"]).stdout
    )
    assert as_json["verdict"] == "found" and as_json["step"]["seq"] == 38
    assert as_json["input"]["vars"]["balance"] == 460
    never = runner.invoke(
        app, ["bisect", made["loop"], "--check", "tests.integration.timeline_handlers:always"]
    )
    assert never.exit_code == 1
    assert "holds after every step" in never.output


def test_cli_errors_exit_2_without_a_traceback(
    runs: tuple[Runtime, dict[str, str]],
    cli_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _runtime, made = runs
    for argv, message in (
        (["history", "no-such-run"], "error: no run no-such-run"),
        (["state", made["order"], "--at", "99"], "has events 1 to 7; there is no seq 99"),
        (["bisect", made["loop"], "--check", "nope"], "cannot use 'nope' as a predicate"),
        (
            ["bisect", made["loop"], "--check", "tests.integration.timeline_handlers:broken"],
            "the predicate raised KeyError",
        ),
    ):
        monkeypatch.setattr(sys, "argv", ["cairn", *argv])
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == 2, argv
        err = flat(capsys.readouterr().err)
        assert message in err, err
        assert "Traceback" not in err


def test_client_reaches_the_timeline(runs: tuple[Runtime, dict[str, str]], home: Path) -> None:
    _runtime, made = runs
    client = Client(settings(home))
    try:
        assert [s.seq for s in client.timeline(made["order"]).steps()] == [2, 3, 5, 6, 7]
    finally:
        client.close()
