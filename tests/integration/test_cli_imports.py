"""What each quick ``cairn`` command imports, in a fresh process: ``--help`` and
``--version`` nothing of the engine, the database or the broker; the commands that read
or answer runs no Celery, no web framework, no ORM and none of the user's handler code —
even with a broker configured. (How long they take is measured by bench/cli.py, not here.)

The commands run on the embedded default (SQLite under a temporary CAIRN_HOME), with
CAIRN_BROKER_URL pointing at a port nothing listens on: a command that built a broker
connection would import Celery, and fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.client import Client
from cairn.config import Settings

ROOT = Path(__file__).resolve().parents[2]

# A wait first: status explains it, a signal ends the run, a cancel stops it. (A signal
# that dispatches a node hands the message to the broker after it has answered.)
WORKFLOW = """\
name: cli_imports
version: 1
start: review
nodes:
  review: {wait: {signals: {approve: done, redo: work}, timeout: 1h, on_timeout: work}}
  work:   {handler: "tests.unit.handlers:noop", next: review, max_visits: 2}
  done:   {end: succeeded}
"""
HANDLERS = "tests.unit.handlers"

NEVER_FOR_HELP = {
    "sqlalchemy", "psycopg", "celery", "kombu", "redis", "fastapi", "starlette", "uvicorn",
    "httpx", "openai", "anthropic", "sentry_sdk", "prometheus_client", "yaml", "jsonschema",
    "cairn.engine", "cairn.decider", "cairn.definitions", "cairn.store", "cairn.runtime",
    "cairn.client", "cairn.config", "cairn.model.state",
}  # fmt: skip
NEVER_FOR_RUNS = {
    "celery", "kombu", "fastapi", "starlette", "uvicorn", "httpx", "openai", "anthropic",
    "cairn.workers", "cairn.scheduler", "cairn.api", "cairn.runtime", "cairn.client",
    "cairn.effects", "cairn.artifacts", HANDLERS,
    "sqlalchemy.orm",  # the tables are Core: the ORM is a tenth of the import time
    # On the embedded default (these tests'): a current schema is one query, and
    # PostgreSQL's driver is PostgreSQL's business.
    "alembic", "psycopg",
}  # fmt: skip

PROBE = """\
import atexit, json, sys
atexit.register(lambda: print("\\n" + json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv = ["cairn", *json.loads(sys.argv[1])]
from cairn.cli.main import main
main()
"""


def imported(env: dict[str, str], *args: str) -> set[str]:
    """The modules a fresh ``cairn ARGS`` process has loaded when it exits (successfully)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def loaded(modules: set[str], names: set[str]) -> list[str]:
    """Which of ``names`` (packages: any module inside counts) were loaded."""
    return sorted(n for n in names if any(m == n or m.startswith(f"{n}.") for m in modules))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[str]]:
    """An embedded deployment with a workflow and three runs waiting for a signal."""
    home = tmp_path_factory.mktemp("home")
    env = {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}
    env.update({"CAIRN_HOME": str(home), "PYTHONPATH": str(ROOT)})
    definition = home / "cli_imports.yaml"
    definition.write_text(WORKFLOW)
    client = Client(Settings.from_env({"CAIRN_HOME": str(home)}))
    try:
        client.register(definition)
        runs = [client.submit("cli_imports") for _ in range(3)]
    finally:
        client.close()
    # From here on a broker is configured, and unreachable: nothing may try to use it.
    env["CAIRN_BROKER_URL"] = "redis://127.0.0.1:9/0"
    return env, [*runs, str(definition)]


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["status", "--help"]])
def test_help_and_version_import_nothing_heavy(
    deployment: tuple[dict[str, str], list[str]], args: list[str]
) -> None:
    env, _ = deployment
    assert loaded(imported(env, *args), NEVER_FOR_HELP) == []


def test_commands_that_read_or_answer_runs_import_no_broker_web_or_handler_code(
    deployment: tuple[dict[str, str], list[str]],
) -> None:
    env, (first, second, third, definition) = deployment
    commands = [
        ["status", first],
        ["status", first, "--json"],
        ["events", first],
        ["state", first],
        ["waiting"],
        ["runs"],
        ["runs", "--status", "waiting", "--json"],
        ["calls", first],
        ["signal", second, "approve"],  # moves the run on: a node message is committed
        ["cancel", third, "--reason", "not needed"],
        ["validate", definition],
    ]
    for args in commands:
        # Validating a definition is checking that its handlers import: it must load them.
        never = NEVER_FOR_RUNS - {HANDLERS} if args[0] == "validate" else NEVER_FOR_RUNS
        assert loaded(imported(env, *args), never) == [], args


def test_commands_that_only_read_the_log_need_no_redis(
    deployment: tuple[dict[str, str], list[str]],
) -> None:
    """Leases live in Redis; the log and the state do not: with Redis configured and out
    of reach, these answer all the same, without importing its client."""
    env, (first, *_) = deployment
    env = {**env, "CAIRN_REDIS_URL": "redis://127.0.0.1:9/1"}
    for args in (["events", first], ["state", first], ["waiting"], ["calls", first]):
        assert loaded(imported(env, *args), {"redis", "cairn.lease.redis"}) == [], args


def test_the_probes_a_remote_command_skips_import_again_after_its_client_is_built() -> None:
    """Remote mode keeps httpcore and tenacity from importing trio and tornado while it
    builds its client; code that runs after it (or beside it) imports them as ever."""
    code = """\
import sys
from cairn.cli.remote import api
with api():
    assert "trio" not in sys.modules and "tornado" not in sys.modules, sorted(sys.modules)
import tornado
print("imported")
"""
    env = {**os.environ, "CAIRN_API_URL": "http://127.0.0.1:9", "CAIRN_API_KEY": "k"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "imported", done.stderr


def test_the_command_entry_imports_only_the_standard_library_before_it_hands_over() -> None:
    """What ``cairn`` loads before it knows whether the preloaded command line takes the
    command: the standard library and its own two modules, nothing installed."""
    code = """\
import json, sys
before = set(sys.modules)
import cairn.cli.entry
print(json.dumps(sorted(set(sys.modules) - before)))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded_now = json.loads(done.stdout)
    ours = {"cairn", "cairn.cli", "cairn.cli.entry", "cairn.cli.preload",
            "cairn.cli.preload.handoff", "cairn.cli.preload.place"}  # fmt: skip
    foreign = [
        name for name in loaded_now
        if name not in ours and name.split(".")[0].lstrip("_") not in sys.stdlib_module_names
        and name.split(".")[0] not in sys.stdlib_module_names
    ]  # fmt: skip
    assert foreign == [], foreign
