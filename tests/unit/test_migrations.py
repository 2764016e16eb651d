"""Migrating runs between versions of their workflow on the embedded engine (SQLite):
each check that keeps a run where it is, what is refused, the command, and the decider's
move. The move itself (one ``run_migrated`` event, the run on the new version, restorable
from its history) and its rollback, each run to its end by workers:
``tests/embedded/test_migrations.py``.

The same scenario runs on PostgreSQL with real workers in
``tests/integration/test_migrations.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn.cli.main import app
from cairn.client import Client
from cairn.config import Settings
from cairn.decider import decide
from cairn.definitions.loader import load_definition, load_file
from cairn.definitions.text import parse_text
from cairn.engine.migrations import MigrationRequest
from cairn.errors import CodeUnavailable, InvalidInput, NotMigratable, UnknownWorkflow
from cairn.model.events import RunMigrated
from cairn.model.migrations import MigrationReport, Where
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.testing.driver import Driver

FLOWS = Path(__file__).resolve().parents[1] / "integration" / "migration_workflows"
MAPS = "tests.integration.migration_maps"
MAP = f"{MAPS}:journey_1_to_2"


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    built = Runtime.build(Settings(home=tmp_path, workflows=[]))
    for name in ("journey_v1.yaml", "journey_v2.yaml"):
        built.orchestrator.registry.register(load_file(FLOWS / name))
    try:
        yield built
    finally:
        built.close()


def request(where: tuple[str, ...] = (), mapping: str = MAP) -> MigrationRequest:
    return MigrationRequest("default", "journey", 1, 2, mapping, Where.parse(where), "tidy up")


def migrate(runtime: Runtime, *, dry_run: bool, **asked: Any) -> MigrationReport:
    return runtime.orchestrator.migrate_runs(request(**asked), actor="db:tester", dry_run=dry_run)


def reasons(report: MigrationReport) -> dict[str, list[str]]:
    return {v.run_id: [r.code for r in v.reasons] for v in report.runs if v.reasons}


def start(runtime: Runtime, **run_input: Any) -> str:
    """A run of version 1 (version 2 is the newest: a plain submit would start one)."""
    return runtime.orchestrator.submit("journey", run_input, version=1)


def events(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    return runtime.orchestrator.events(run_id)


def test_a_dry_run_names_each_run_that_cannot_move_and_why_and_writes_nothing(
    runtime: Runtime,
) -> None:
    fine = [start(runtime, kind="review", amount=12) for _ in range(3)]
    held = start(runtime, kind="hold", amount=5)
    wordy = start(runtime, kind="review", amount="twelve")
    busy = start(runtime, kind="ship", amount=3)  # pack is dispatched: in flight
    done = start(runtime, kind="review", amount=1)
    runtime.orchestrator.cancel(done, "not needed")
    seqs = {run_id: len(events(runtime, run_id)) for run_id in [*fine, held, wordy, busy]}

    report = migrate(runtime, dry_run=True)

    assert reasons(report) == {
        held: ["node_removed"],
        wordy: ["state_schema"],
        busy: ["in_flight"],
    }
    assert {v.run_id for v in report.movable} == set(fine)
    assert {v.to_node for v in report.movable} == {"approval"}
    (why,) = next(v for v in report.runs if v.run_id == wordy).reasons
    assert "amount: 'twelve' is not of type 'number'" in why.message
    assert done not in {v.run_id for v in report.runs}  # finished: not selected
    for run_id, seq in seqs.items():  # nothing written
        assert len(events(runtime, run_id)) == seq
        assert runtime.orchestrator.get_run(run_id).version == 1


def test_a_rollback_is_refused_once_the_run_has_moved_on_v2(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    never = start(runtime, kind="review", amount=1)
    with pytest.raises(NotMigratable, match="never migrated"):
        orchestrator.rollback_migration(never, actor="db:tester")
    run_id = start(runtime, kind="review", amount=12)
    migrate(runtime, dry_run=False)
    orchestrator.signal(run_id, "approve")  # check is dispatched on v2
    seq = events(runtime, run_id)[-1]["seq"]
    with pytest.raises(NotMigratable, match="has moved since"):
        orchestrator.rollback_migration(run_id, actor="db:tester")
    assert events(runtime, run_id)[-1]["seq"] == seq
    assert orchestrator.get_run(run_id).version == 2


def test_where_selects_by_node_and_state_and_the_mapping_may_keep_runs(runtime: Runtime) -> None:
    eu = start(runtime, kind="review", amount=1, region="eu")
    start(runtime, kind="review", amount=1, region="us")
    start(runtime, kind="hold", amount=1, region="eu")
    picked = migrate(runtime, dry_run=True, where=("vars.region=eu", "node=review"))
    assert [v.run_id for v in picked.runs] == [eu]
    kept = migrate(runtime, dry_run=True, mapping=f"{MAPS}:keeps_everyone")
    assert {r.code for v in kept.runs for r in v.reasons} >= {"stays"}
    assert not kept.movable


def test_a_mapping_that_raises_or_answers_nonsense_is_that_runs_verdict(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "odd_maps.py").write_text(
        "import itertools\n"
        "from cairn.model.migrations import Migration\n"
        "count = itertools.count()\n"
        "def raises(run):\n    raise KeyError('amount')\n"
        "def nonsense(run):\n    return {'node': 'approval'}\n"
        "def unstable(run):\n    return Migration(node='approval', vars={'n': next(count)})\n"
        "def nowhere(run):\n    return Migration(node='pack')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    start(runtime, kind="review", amount=1)
    expected = {
        "raises": "mapping_failed",
        "nonsense": "mapping_failed",
        "unstable": "mapping_unstable",
        "nowhere": "unknown_target",
    }
    for name, code in expected.items():
        (verdict,) = migrate(runtime, dry_run=True, mapping=f"odd_maps:{name}").runs
        assert [r.code for r in verdict.reasons] == [code], name


def test_what_is_asked_wrong_is_refused_before_anything_is_read(runtime: Runtime) -> None:
    with pytest.raises(CodeUnavailable):
        migrate(runtime, dry_run=True, mapping="nowhere_at_all:fn")
    with pytest.raises(InvalidInput, match="KEY=VALUE"):
        Where.parse(["node"])
    with pytest.raises(InvalidInput, match="KEY is node"):
        Where.parse(["colour=red"])
    with pytest.raises(UnknownWorkflow):
        runtime.orchestrator.migrate_runs(
            MigrationRequest("default", "journey", 1, 3, MAP), actor=None, dry_run=True
        )
    with pytest.raises(InvalidInput, match="same version"):
        runtime.orchestrator.migrate_runs(
            MigrationRequest("default", "journey", 1, 1, MAP), actor=None, dry_run=True
        )


def test_a_state_schema_must_be_a_json_schema() -> None:
    spec = (FLOWS / "journey_v2.yaml").read_text().replace("type: object", "type: objekt", 1)
    with pytest.raises(Exception, match="bad_state_schema") as raised:
        load_definition(parse_text(spec, ".yaml", source="journey_v2.yaml"))
    assert "'state' is not a valid JSON Schema" in str(raised.value)


def test_cairn_runs_migrate_in_direct_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line: a dry run's lines and counts, the move (audited as db:<user>),
    a rollback; ``cairn runs`` still lists."""
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    for key in [key for key in os.environ if key.startswith("CAIRN_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    client = Client()
    client.register(FLOWS / "journey_v1.yaml")
    moving = client.submit("journey", {"kind": "review", "amount": 3})
    staying = client.submit("journey", {"kind": "hold", "amount": 3})
    client.register(FLOWS / "journey_v2.yaml")
    move = ["runs", "migrate", "--from", "journey@1", "--to", "journey@2", "--map", MAP]

    dry = CliRunner().invoke(app, [*move, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"{moving}  review -> approval  would move" in dry.output
    assert f"{staying}  hold  stays: node_removed:" in dry.output
    assert "2 selected, 1 would move, 1 stay (dry run: nothing written)" in dry.output
    assert client.get_run(moving).version == 1

    done = CliRunner().invoke(app, [*move, "--reason", "rename review", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert (report["selected"], report["moved"]) == (2, 1)
    assert client.get_run(moving).version == 2
    last = client.events(moving)[-1]
    assert last["type"] == "run_migrated" and last["data"]["actor"] == client.actor
    listed = CliRunner().invoke(app, ["runs", "--workflow", "journey", "--json"])
    assert {run["version"] for run in json.loads(listed.output)["runs"]} == {1, 2}

    undone = CliRunner().invoke(app, ["runs", "migrate", "--rollback", moving])
    assert undone.exit_code == 0, undone.output
    assert f"{moving} back on version 1, waiting" in undone.output
    # (cairn.cli.main turns these into one line and exit 2: tests/unit/test_cli.py)
    again = CliRunner().invoke(app, ["runs", "migrate", "--rollback", moving])
    assert isinstance(again.exception, NotMigratable)
    wrong = CliRunner().invoke(app, [*move[:5], "journey", "--map", MAP])
    assert isinstance(wrong.exception, InvalidInput)
    assert "WORKFLOW@VERSION" in str(wrong.exception)
    client.close()


# -- the decider's part, pure ---------------------------------------------------------------


def _moved_to(node: str, **changes: Any) -> RunMigrated:
    fields: dict[str, Any] = {"at": 2_000.0, "from_version": 1, "to_version": 2, "node": node}
    return RunMigrated(**{**fields, "vars": {"amount": 1}, **changes})


def test_the_decider_moves_a_waiting_run_and_arms_the_new_waits_timeout() -> None:
    v1, v2 = (load_file(FLOWS / f"journey_v{n}.yaml") for n in (1, 2))
    driver = Driver(v1)
    driver.start(kind="review", amount=1)
    decision = decide(v2, driver.state, _moved_to("approval"))
    state = decision.state
    assert (state.version, state.status, state.vars) == (2, RunStatus.WAITING, {"amount": 1})
    assert [(t.source, t.label, t.target) for t in decision.transitions] == [
        ("(migrate)", "migrated", "approval")
    ]
    assert set(state.timers) == {"wait:approval:1:0"}  # the review's is disarmed
    assert state.timers["wait:approval:1:0"].due_at == 2_000.0 + 2 * 3600


def test_the_decider_refuses_a_move_that_does_not_fit_and_changes_nothing() -> None:
    v1, v2 = (load_file(FLOWS / f"journey_v{n}.yaml") for n in (1, 2))
    waiting = Driver(v1)
    waiting.start(kind="review", amount=1)
    with pytest.raises(NotMigratable, match="does not apply"):
        decide(v1, waiting.state, _moved_to("approval"))  # decided under the old version
    with pytest.raises(NotMigratable, match="has no node 'nowhere'"):
        decide(v2, waiting.state, _moved_to("nowhere"))
    with pytest.raises(NotMigratable, match="branch of the parallel node"):
        decide(v2, waiting.state, _moved_to("pack"))
    packing = Driver(v1)
    packing.start(kind="ship", amount=1)
    with pytest.raises(NotMigratable, match="pack#1 is in flight"):
        decide(v2, packing.state, _moved_to("approval"))
    with pytest.raises(NotMigratable, match="carries the state to return to"):
        decide(
            v1,
            decide(v2, waiting.state, _moved_to("approval")).state,
            _moved_to("review", from_version=2, to_version=1, undoes=3),
        )
