"""The ``cairn`` command line: validate, describe, config, in process (``cairn watch``
following a run: tests/embedded/test_cli.py; the installed script itself:
tests/integration/test_cli_script.py)."""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn.cli.main import COMMAND_MODULES, app, main, modules_for
from cairn.client import Client
from cairn.errors import CairnError, ConfigError
from cairn.model.awaiting import RECOVERY_SIGNALS, Awaiting
from cairn.model.events import NodeHeld, Phase, stamped
from cairn.observe.waits import describe
from tests.support import cli
from tests.support.cli import flat

BROKEN = "tests/fixtures/broken.yaml"
BROKEN_CODES = [
    "unknown_target",
    "unresolved_import",
    "unreachable",
    "no_path_to_end",
    "wait_without_timeout",
    "join_unknown_branch",
    "join_non_branch",
    "quorum_out_of_range",
    "route_without_default",
    "duplicate_name",
    "unbounded_cycle",
    "bad_duration",
]

UNINSTALLED_YAML = """\
name: elsewhere
version: 3
start: fetch
nodes:
  fetch: {handler: "not_installed_here.tasks:fetch", next: check}
  check: {handler: "not_installed_here.tasks:check",
          branch: {guard: "not_installed_here.tasks:ok", cases: {"true": done, "false": fetch}},
          max_visits: 4}
  done:  {end: succeeded}
"""


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every command from the repo root with no CAIRN_* settings, restoring sys.path."""
    cli.at_repo_root(monkeypatch)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def example_paths() -> list[str]:
    return sorted(glob.glob("examples/*"))


def clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}


# -- validate ----------------------------------------------------------------------------


def test_help_labels_only_options_that_take_a_value(runner: CliRunner) -> None:
    """A flag takes no value: its help shows none (typer 0.29's rich panel showed every
    option, --help included, as <bool>)."""
    shown = runner.invoke(app, ["status", "--help"])
    assert shown.exit_code == 0, shown.output
    lines = {line.split()[0]: line for line in shown.output.splitlines() if "--" in line}
    for flag in ("--json", "--fleet", "--help"):
        assert "<" not in lines[flag], lines[flag]
    shown = runner.invoke(app, ["wait", "--help"])
    assert "--timeout <float>" in shown.output
    assert "<bool>" not in runner.invoke(app, ["--help"]).output


def test_version_is_the_installed_packages(runner: CliRunner) -> None:
    from importlib.metadata import version  # noqa: PLC0415

    shown = runner.invoke(app, ["--version"])
    assert (shown.exit_code, shown.output) == (0, f"cairn {version('cairn')}\n")


def test_validate_examples(runner: CliRunner) -> None:
    paths = example_paths()
    assert "examples/book_flight.yaml" in paths
    result = runner.invoke(app, ["validate", *paths])
    assert result.exit_code == 0, result.output
    ok_lines = [line for line in result.stdout.splitlines() if line.startswith("ok")]
    keys = {line.split()[1] for line in ok_lines}
    assert keys == {"book_flight@1", "agent_loop@1", "weekly_report@1", "research_agent@1"}
    assert "examples/book_flight.yaml" in result.stdout
    assert "examples/weekly_report.py:weekly_report" in result.stdout
    assert "fail" not in result.output


def test_validate_broken_exits_2_and_names_every_fault(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", BROKEN])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    assert f"fail {BROKEN}" in result.stderr
    for code in BROKEN_CODES:
        assert f"[{code}]" in result.stderr, code
    assert "1 of 1 definition(s) invalid" in result.stderr


def test_validate_reports_good_and_bad_together(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", "examples/book_flight.yaml", BROKEN])
    assert result.exit_code == 2
    assert "ok   book_flight@1" in result.stdout
    assert "1 of 2 definition(s) invalid" in result.stderr


def test_validate_missing_file_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", "examples/no_such_workflow.yaml"])
    assert result.exit_code == 2
    assert "examples/no_such_workflow.yaml" in result.stderr
    assert "[unreadable]" in flat(result.stderr)


def test_validate_missing_module_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", "no_such_module_for_cairn_tests"])
    assert result.exit_code == 2
    assert "[import_failed]" in flat(result.stderr)


def test_validate_nothing_found_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", "examples/flights.py"])
    assert result.exit_code == 2
    assert "no workflow definitions found" in result.stderr


def test_validate_needs_a_path(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate"])
    assert result.exit_code != 0


TYPOS_YAML = """\
name: typos
version: 1
start: a
nodes:
  a: {handler: "examples.flights:search", retyr: {attempts: 5}, timout: 5m, next: notify}
  notify: {parallel: [email, sms], join: {polcy: quorum}, next: done}
  email: {handler: "examples.flights:send_email"}
  sms: {handler: "examples.flights:send_sms"}
  done: {end: succeeded}
"""


def test_validate_names_each_misspelt_key_and_its_suggestion(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "typos.yaml"
    path.write_text(TYPOS_YAML)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    faults = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith("-")]
    assert faults == [
        "- node 'a': unknown key 'retyr' (did you mean 'retry'?) [unknown_key]",
        "- node 'a': unknown key 'timout' (did you mean 'timeout'?) [unknown_key]",
        "- node 'notify': unknown key 'polcy' in 'join' (did you mean 'policy'?) [unknown_key]",
    ]


def hostile_files(folder: Path) -> list[Path]:
    """Definitions built to break a parser: deep nesting, exponential aliases, bytes that
    are not text, keys YAML cannot hash."""
    laughs = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        laughs.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    files = {
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "deep_objects.json": '{"a":' * 50_000 + "1" + "}" * 50_000,
        "deep.yaml": "nodes: " + "[" * 100_000,
        "deep_block.yaml": "".join(f"{'  ' * i}k{i}:\n" for i in range(2_000)) + "  " * 2_000 + "x",
        "laughs.yaml": "\n".join(laughs) + "\n",
        "complex_key.yaml": "? [a, b]\n: c\n",
        "python_tag.yaml": "name: !!python/object/apply:os.system ['true']\n",
        "not_a_mapping.yaml": "- just\n- a list\n",
    }
    paths = []
    for name, text in files.items():
        paths.append(folder / name)
        paths[-1].write_text(text)
    paths.append(folder / "binary.yaml")
    paths[-1].write_bytes(b"\xff\xfe\x00name: x\x00\x81")
    return paths


def test_validate_answers_hostile_files_with_one_line_faults(
    runner: CliRunner, tmp_path: Path
) -> None:
    for path in hostile_files(tmp_path):
        result = runner.invoke(app, ["validate", str(path)])
        assert result.exit_code == 2, (path.name, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), path.name
        faults = [line for line in result.stderr.splitlines() if line.strip().startswith("-")]
        assert len(faults) == 1, (path.name, result.stderr)
        assert re.search(r"\[(too_complex|syntax|not_a_mapping)\]$", faults[0]), faults[0]
        assert len(faults[0]) < 400, faults[0]


# -- describe ----------------------------------------------------------------------------


def test_describe_json(runner: CliRunner) -> None:
    result = runner.invoke(app, ["describe", "examples/book_flight.yaml", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["workflow"] == "book_flight"
    assert payload["version"] == 1
    assert payload["start"] == "search"
    assert payload["nodes"]["approval"] == {"kind": "wait", "timeout": "24h"}
    assert payload["nodes"]["reserve"]["retry_attempts"] == 5
    # The effective timeout and retry: search gives neither, so it has the defaults.
    assert payload["node_timeout"] == "1h"
    assert payload["nodes"]["search"]["timeout"] == "1h"
    assert payload["nodes"]["search"]["retry"] == {
        "attempts": 3,
        "backoff": "1s",
        "max_delay": "30s",
        "jitter": "full",
    }
    assert "retry" not in payload["nodes"]["notify"]  # a fan-out runs no handler
    assert payload["nodes"]["done"] == {"kind": "end", "status": "succeeded"}
    moves = {(t["source"], t["event"], t["target"]) for t in payload["transitions"]}
    assert ("price_check", "case:true", "reserve") in moves
    assert ("price_check", "case:false", "approval") in moves
    assert ("approval", "timeout", "escalate") in moves
    assert ("approval", "signal:approve", "reserve") in moves
    assert ("approval", "signal:reject", "rejected") in moves
    assert ("reserve", "failed:permanent", "rejected") in moves
    assert ("triage", "route:default", "done") in moves
    assert ("notify", "fan_out", "email") in moves
    assert ("(start)", "started", "search") in moves
    for row in payload["transitions"]:
        assert set(row) == {"source", "event", "guard", "target"}


def test_describe_mermaid(runner: CliRunner) -> None:
    result = runner.invoke(app, ["describe", "examples/book_flight.yaml", "--format", "mermaid"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("flowchart TD")
    assert '"signal:approve"' in result.stdout
    assert "approval" in result.stdout


def test_describe_table(runner: CliRunner) -> None:
    result = runner.invoke(app, ["describe", "examples/book_flight.yaml"])
    assert result.exit_code == 0, result.output
    assert "book_flight@1" in result.stdout
    assert "signal:approve" in result.stdout
    assert "case:true" in result.stdout


def test_describe_short_format_option(runner: CliRunner) -> None:
    result = runner.invoke(app, ["describe", "examples/agent_loop.yaml", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["workflow"] == "agent_loop"


def test_describe_python_module(runner: CliRunner) -> None:
    result = runner.invoke(app, ["describe", "examples/weekly_report.py", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["workflow"] == "weekly_report"
    moves = {(t["source"], t["event"], t["target"]) for t in payload["transitions"]}
    assert ("review", "case:false", "compose") in moves


def test_describe_unknown_format_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["describe", "examples/book_flight.yaml", "--format", "dot"])
    assert result.exit_code == 2
    assert result.stdout == ""


def test_describe_broken_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["describe", BROKEN])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "[unbounded_cycle]" in flat(result.stderr)


def test_describe_no_resolve_for_code_not_installed_here(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.yaml"
    path.write_text(UNINSTALLED_YAML, encoding="utf-8")

    resolved = runner.invoke(app, ["describe", str(path), "--format", "json"])
    assert resolved.exit_code == 2
    assert "[unresolved_import]" in flat(resolved.stderr)

    result = runner.invoke(app, ["describe", str(path), "--no-resolve", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["workflow"] == "elsewhere"
    assert payload["nodes"]["fetch"]["handler"] == "not_installed_here.tasks:fetch"
    moves = {(t["source"], t["event"], t["target"]) for t in payload["transitions"]}
    assert ("check", "case:false", "fetch") in moves


def test_describe_no_resolve_still_validates_the_graph(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.yaml"
    path.write_text(UNINSTALLED_YAML.replace("next: check", "next: nowhere"), encoding="utf-8")
    result = runner.invoke(app, ["describe", str(path), "--no-resolve"])
    assert result.exit_code == 2
    assert "[unknown_target]" in flat(result.stderr)
    assert "[unresolved_import]" not in flat(result.stderr)


# -- config ------------------------------------------------------------------------------


def test_config_prints_effective_settings(runner: CliRunner) -> None:
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["effective_database_url"].startswith("sqlite:///")
    assert payload["effective_database_url"].endswith("cairn.db")
    assert payload["database_url"] is None
    assert payload["log_level"] == "INFO"


def test_config_masks_passwords(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_DATABASE_URL", "postgresql://cairn:hunter2@db:5432/cairn")
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["effective_database_url"] == "postgresql://cairn:***@db:5432/cairn"
    assert "hunter2" not in result.output


def test_config_unknown_variable_raises_config_error_in_app(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_DATABSE_URL", "postgresql://localhost/cairn")
    result = runner.invoke(app, ["config"])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "did you mean CAIRN_DATABASE_URL?" in str(result.exception)


def test_main_turns_config_error_into_a_clean_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CAIRN_DATABSE_URL", "postgresql://localhost/cairn")
    monkeypatch.setattr(sys, "argv", ["cairn", "config"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = flat(captured.err)
    assert err.startswith("error: unknown setting(s): CAIRN_DATABSE_URL")
    assert "(did you mean CAIRN_DATABASE_URL?)" in err
    assert "Traceback" not in captured.err


def test_main_exits_0_on_success(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["cairn", "config"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)
    assert "effective_database_url" in json.loads(capsys.readouterr().out)


# -- signal --------------------------------------------------------------------------------


def test_signal_decides_a_held_node_and_refuses_a_second_decision(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the embedded default: a payment held for an operator, decided from the CLI."""
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    monkeypatch.setenv("CAIRN_WORKFLOWS", "tests/integration/workflows/pay.yaml")
    client = Client()
    run_id = client.submit("pay", {})
    held = NodeHeld(at=0.0, node="charge", reason="irreversible: its worker was lost")
    client.runtime.orchestrator.apply(run_id, partial(stamped, held))
    client.close()

    listed = runner.invoke(app, ["waiting"])
    assert listed.exit_code == 0, listed.output
    assert f"{run_id} charge#1: held for an operator: irreversible" in flat(listed.output)
    as_json = json.loads(runner.invoke(app, ["waiting", "--json"]).stdout)
    assert [(e["run_id"], e["node"], e["held"]) for e in as_json] == [(run_id, "charge", True)]

    shown = runner.invoke(app, ["status", run_id])
    assert shown.exit_code == 0, shown.output
    assert "charge#1: held for an operator: irreversible" in flat(shown.output)
    assert f"cairn signal {run_id} recovery.retry" in flat(shown.output)

    decided = runner.invoke(
        app,
        [
            "signal",
            run_id,
            "recovery.complete",
            "--payload",
            '{"output": {"charge_id": "ch_1"}}',
            "--comment",
            "checked with the provider",
            "--id",
            "ticket-1",
        ],
    )
    assert decided.exit_code == 0, decided.output
    assert f"{run_id} running" in decided.output
    again = runner.invoke(app, ["signal", run_id, "recovery.complete", "--id", "ticket-1"])
    assert "already applied" in again.output
    refused = runner.invoke(app, ["signal", run_id, "recovery.retry"])
    assert refused.exit_code != 0
    assert "no node held for an operator" in str(refused.exception)
    bad = runner.invoke(app, ["signal", run_id, "recovery.retry", "--payload", "[1]"])
    assert "must be a JSON object" in str(bad.exception)


# -- submit, status, register --------------------------------------------------------------


def test_submit_takes_a_priority_and_status_shows_it(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the embedded default (SQLite): the CLI, the client and a batch store a run's
    priority; a bad one is refused before anything is stored."""
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    monkeypatch.setenv("CAIRN_WORKFLOWS", "tests/integration/workflows")
    submitted = runner.invoke(app, ["submit", "approval", "--priority", "4"])
    assert submitted.exit_code == 0, submitted.output
    run_id = submitted.output.strip().splitlines()[-1]
    shown = runner.invoke(app, ["status", run_id])
    assert shown.exit_code == 0, shown.output
    assert "priority: 4" in shown.output
    as_json = runner.invoke(app, ["status", run_id, "--json"])
    assert json.loads(as_json.output)["priority"] == 4
    refused = runner.invoke(app, ["submit", "approval", "--priority", "9"])
    assert refused.exit_code != 0
    assert "priority must be from -5 to 5" in flat(refused.output + str(refused.exception))
    client = Client()
    try:
        with pytest.raises(CairnError, match="an integer from -5 to 5"):
            client.submit("approval", {}, priority="high")  # type: ignore[arg-type]
        answers = client.submit_batch(
            [{"workflow": "approval", "priority": -5}, {"workflow": "approval", "priority": 7}]
        )
        assert answers[0].ok and client.get_run(str(answers[0].run_id)).priority == -5
        assert answers[1].error_code == "invalid_priority"
        with client.runtime.store.reading() as tx:
            assert len(tx.list_runs()) == 2  # the CLI's and the batch's good one
    finally:
        client.close()


def test_the_entry_point_imports_the_module_that_registers_each_command() -> None:
    """A command line loads only its command's module (cairn.cli.main.COMMAND_MODULES):
    the map must name, for every command and group, the module that registers it."""
    registered = {
        command.name or command.callback.__name__.replace("_", "-"): command.callback.__module__
        for command in app.registered_commands
        if command.callback is not None
    }
    for group in app.registered_groups:
        commands = group.typer_instance.registered_commands if group.typer_instance else []
        assert group.name is not None and commands and commands[0].callback is not None
        registered[group.name] = commands[0].callback.__module__
    assert {name: f"cairn.cli.{module}" for name, module in COMMAND_MODULES.items()} == registered
    assert modules_for(["--api-url", "http://h", "status", "r"]) == ["runs"]
    assert modules_for(["--api-url=http://h", "runs", "--help"]) == ["listing"]
    assert modules_for(["--version"]) == []
    assert modules_for(["--help", "status"]) is None  # the root's help: every command
    assert modules_for(["statsu"]) is None  # click's "did you mean" needs them all


def test_register_of_a_new_version_prints_what_it_changes_in_the_transitions(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path / "home"))
    steps = {
        "a": {"handler": "tests.integration.handlers:step", "next": "done"},
        "done": {"end": "succeeded"},
    }
    first = {"name": "grows", "version": 1, "start": "a", "nodes": steps}
    checked = {
        **steps,
        "a": {**steps["a"], "next": "check"},
        "check": {"handler": "tests.integration.handlers:step", "next": "done"},
    }
    second = {**first, "version": 2, "nodes": checked}
    for version, spec in ((1, first), (2, second)):
        (tmp_path / f"v{version}.json").write_text(json.dumps(spec))
    registered = runner.invoke(app, ["register", str(tmp_path / "v1.json")])
    assert registered.exit_code == 0, registered.output
    assert "transitions" not in registered.output  # nothing registered before it
    again = runner.invoke(app, ["register", str(tmp_path / "v2.json")])
    assert again.exit_code == 0, again.output
    lines = [line.strip() for line in again.output.splitlines()]
    changed = lines.index("transitions changed from version 1:")
    shown = [line for line in lines[changed + 1 :] if line]
    assert shown[:3] == [
        "- a --succeeded--> done",
        "+ a --succeeded--> check",
        "+ check --succeeded--> done",
    ]
    assert all(line.startswith("+ ") and "check" in line for line in shown[3:]), shown


def test_a_held_compensation_reads_as_one_from_its_json_form() -> None:
    """`cairn waiting` rebuilds what waits from JSON (the API's, or the database's
    answer) and words it without loading the engine's Phase: the two must agree."""
    held = Awaiting("r", "refund", 1, Phase.COMPENSATE.value, RECOVERY_SIGNALS, 0.0, reason="x")
    again = Awaiting.from_dict(json.loads(json.dumps(held.to_dict())))
    assert again == held
    assert describe(again, 0.0).startswith("refund#1 (compensation): held for an operator: x")
