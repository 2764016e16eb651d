"""The CLI's remote mode (``CAIRN_API_URL`` and a key) against a real ``cairn api`` with a
worker and the scheduler on PostgreSQL and Redis, and the effect service: every operator
command found on the typer app reaches an endpoint the API's OpenAPI document has (or is
written out below as having no remote form); listing runs with filters and pages, signal,
cancel, rollback, a fork's dry run, resolving a flagged effect and a bulk cancel work over
HTTP and print what direct mode prints for the same runs; refusals are one line; remote
mode imports no database driver nor broker.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner, Result

from cairn.access.authenticate import config_key_name
from cairn.api.app import create_app
from cairn.cli.main import app
from cairn.config import Settings
from cairn.http import ApiError
from tests.support.api_server import Deployment, api_deployment
from tests.support.cluster import WORKFLOWS
from tests.support.services import ROOT
from tests.support.shop import ADAPTERS, Service, running_service

MIGRATIONS = ROOT / "tests" / "integration" / "migration_workflows"
MAPPING = "tests.integration.migration_maps:journey_1_to_2"
ADMIN = "cli-bootstrap-key-0123456789abcd"
NAMESPACE = "ops"
ACTOR = f"key:{config_key_name(ADMIN)}"

# Commands with no remote form, and why. Every other command must reach an endpoint.
NO_REMOTE: dict[tuple[str, ...], str] = {
    ("api",): "a process: it serves the API",
    ("worker",): "a process: it runs nodes",
    ("scheduler",): "a process: relay, timers, recovery",
    ("db", "upgrade"): "migrates the database",
    ("probe", "worker"): "checks this host's worker liveness file",
    ("demo",): "dev only: a deployment of its own",
    ("dev",): "a development fleet on its own database (the API it serves included)",
    ("validate",): "reads definition files: the same in both modes",
    ("describe",): "reads definition files: the same in both modes",
    ("config",): "prints this process's settings",
    ("sla",): "reads the database's facts: no endpoint serves them",
    ("artifacts-cleanup",): "a maintenance job on the object store and the database",
}

# One remote invocation of each operator command, in the order they run: placeholders
# are the runs and keys ``made`` prepares.
INVOCATIONS: dict[tuple[str, ...], list[str]] = {
    ("runs",): ["runs", "--status", "succeeded", "--limit", "2"],
    ("runs", "migrate"): [
        "runs", "migrate", "--from", "approval@1", "--to", "approval@2", "--map", "{mapping}",
        "--dry-run",
    ],
    ("waiting",): ["waiting"],
    ("versions",): ["versions"],
    ("status",): ["status", "{done}"],
    ("events",): ["events", "{done}"],
    ("history",): ["history", "{done}"],
    ("state",): ["state", "{done}", "--at", "2"],
    ("diff",): ["diff", "{done}", "--from", "2", "--to", "3"],
    ("bisect",): ["bisect", "{done}", "--check", "tests.integration.test_cli_remote:always"],
    ("replay",): ["replay", "{done}"],
    ("fork",): ["fork", "{done}", "--at", "1"],
    ("effects",): ["effects", "{done}"],
    ("resolve",): ["resolve", "{done}", "nope", "--outcome", "absent", "--note", "n"],
    ("reconcile",): ["reconcile", "--limit", "1"],
    ("calls",): ["calls", "{done}"],
    ("artifacts",): ["artifacts", "{done}"],
    ("submit",): ["submit", "approval", "--input", "{ledger_input}"],
    ("wait",): ["wait", "{done}", "--timeout", "5"],
    ("watch",): ["watch", "{done}", "--timeout", "5"],
    ("signal",): ["signal", "{waiting}", "approve"],
    ("cancel",): ["cancel", "{cancel_me}"],
    ("rollback",): ["rollback", "{booking}", "--reason", "r", "--plan"],
    ("bulk", "cancel"): ["bulk", "cancel", "--id", "none", "--yes"],
    ("bulk", "signal"): ["bulk", "signal", "approve", "--id", "none", "--yes"],
    ("bulk", "fork"): ["bulk", "fork", "--id", "none", "--yes"],
    ("schedule", "add"): [
        "schedule", "add", "nightly", "--cron", "0 3 * * *", "--workflow", "approval"
    ],
    ("schedule", "list"): ["schedule", "list"],
    ("schedule", "show"): ["schedule", "show", "nightly"],
    ("schedule", "pause"): ["schedule", "pause", "nightly"],
    ("schedule", "resume"): ["schedule", "resume", "nightly"],
    ("schedule", "backfill"): [
        "schedule", "backfill", "nightly", "--start", "2026-01-01", "--end", "2026-01-02"
    ],
    ("schedule", "delete"): ["schedule", "delete", "nightly"],
    ("keys", "create"): ["keys", "create", "cli-bot", "--role", "viewer"],
    ("keys", "list"): ["keys", "list"],
    ("keys", "rotate"): ["keys", "rotate", "{key_id}"],
    ("keys", "revoke"): ["keys", "revoke", "{key_id}"],
    ("register",): ["register", "{checkout_file}"],
    ("shares", "add"): ["shares", "add", "checkout", "--with", "partners"],
    ("shares", "list"): ["shares", "list"],
    ("shares", "revoke"): ["shares", "revoke", "checkout", "--with", "partners"],
    ("pause",): ["pause", "queue", "gpu", "--reason", "node pool upgrade"],
    ("pauses",): ["pauses"],
    ("resume",): ["resume", "queue", "gpu"],
    ("audit",): ["audit", "--limit", "5"],
}  # fmt: skip


def always(_state: dict[str, Any]) -> bool:
    """A bisect predicate that always holds."""
    return True


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    with running_service() as running:
        yield running


@pytest.fixture(scope="module")
def deployment(
    pg_template: str, tmp_path_factory: pytest.TempPathFactory, service: Service
) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("cli_remote")
    env = {"EFFECT_SERVICE_URL": service.url, "CAIRN_EFFECT_ADAPTERS": ADAPTERS}
    api_env = {"CAIRN_API_KEYS": f"{NAMESPACE}:{ADMIN}"}
    with api_deployment(
        pg_template, tmp, env=env, api_env=api_env, namespaces=(NAMESPACE, "default")
    ) as deployed:
        yield deployed


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=deployment.base_url, timeout=60, headers=headers) as client:
        yield client


def submit(http: httpx.Client, workflow: str, payload: dict[str, Any]) -> str:
    started = http.post("/v1/runs", json={"workflow": workflow, "input": payload})
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def wait_for(http: httpx.Client, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = http.get(f"/v1/runs/{run_id}").json()
        if run["status"] in statuses:
            return dict(run)
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def remote_env(deployment: Deployment, key: str = ADMIN) -> dict[str, str | None]:
    return {"CAIRN_API_URL": deployment.base_url, "CAIRN_API_KEY": key}


def direct_env(deployment: Deployment) -> dict[str, str | None]:
    """The database's settings, and no API: direct mode on the same deployment."""
    env: dict[str, str | None] = {
        k: v for k, v in deployment.cluster.env.items() if k.startswith("CAIRN_")
    }
    return {**env, "CAIRN_API_URL": None, "CAIRN_API_KEY": None}


def cli(env: dict[str, str | None], *args: str, given: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env, input=given)


# -- every operator command has an endpoint ---------------------------------------------------


def registered(group: typer.Typer, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command of the app, as its words (``("bulk", "cancel")``)."""
    for command in group.registered_commands:
        assert command.callback is not None
        yield (*prefix, command.name or command.callback.__name__.replace("_", "-"))
    for sub in group.registered_groups:
        assert sub.typer_instance is not None and sub.name is not None
        if sub.typer_instance.info.invoke_without_command:  # the group is a command too
            yield (*prefix, sub.name)
        yield from registered(sub.typer_instance, (*prefix, sub.name))


def endpoints() -> list[tuple[str, re.Pattern[str]]]:
    """The API's operations, each a method and its path as a pattern."""
    document = create_app(Settings.from_env({})).openapi()
    found = []
    for path, operations in document["paths"].items():
        pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")
        found += [(method.upper(), pattern) for method in operations]
    return found


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """Every request an httpx client of this process sends: method, path, status."""
    sent: list[tuple[str, str, int]] = []
    original: Callable[..., httpx.Response] = httpx.Client.send

    def send(self: httpx.Client, request: httpx.Request, **options: Any) -> httpx.Response:
        response = original(self, request, **options)
        sent.append((request.method, request.url.path, response.status_code))
        return response

    monkeypatch.setattr(httpx.Client, "send", send)
    return sent


def test_every_operator_command_reaches_an_endpoint_of_the_api(
    http: httpx.Client, deployment: Deployment, recorded: list[tuple[str, str, int]]
) -> None:
    commands = set(registered(app))
    assert commands == set(INVOCATIONS) | set(NO_REMOTE), (
        f"commands without an invocation here: {commands - set(INVOCATIONS) - set(NO_REMOTE)}; "
        f"listed but gone: {(set(INVOCATIONS) | set(NO_REMOTE)) - commands}"
    )
    made = prepared(http, deployment)
    known = endpoints()
    missing = []
    for command, template in INVOCATIONS.items():
        del recorded[:]
        result = cli(remote_env(deployment), *(word.format(**made) for word in template))
        # A definite answer: done, or the API's refusal (a conflict, a bad name) — never
        # a crash, nor a command that asked nothing.
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            assert isinstance(result.exception, ApiError), (command, result.exception)
        if not recorded:
            missing.append(f"{' '.join(command)}: no request ({result.output.strip()})")
        for method, path, _status in recorded:
            if not any(m == method and p.match(path) for m, p in known):
                missing.append(f"{' '.join(command)}: {method} {path} is no endpoint")
    assert not missing, "\n".join(missing)


def prepared(http: httpx.Client, deployment: Deployment) -> dict[str, str]:
    ledger = str(deployment.ledger)
    done = submit(http, "order", {"order": "enum-1", "ledger": ledger})
    waiting = submit(http, "approval", {"ledger": ledger})
    cancel_me = submit(http, "approval", {"ledger": ledger})
    booking = submit(http, "booking", {"ledger": ledger})
    wait_for(http, done, "succeeded")
    for run_id in (waiting, cancel_me, booking):
        wait_for(http, run_id, "waiting")
    assert http.post("/v1/principals", json={"name": "rotated", "role": "viewer"}).is_success
    key_id = http.post("/v1/principals/rotated/keys", json={}).json()["key_id"]
    return {
        "done": done,
        "waiting": waiting,
        "cancel_me": cancel_me,
        "booking": booking,
        "key_id": key_id,
        "ledger_input": json.dumps({"ledger": ledger}),
        "checkout_file": str(WORKFLOWS / "checkout.yaml"),
        "mapping": MAPPING,
    }


# -- what the commands do over HTTP ------------------------------------------------------------


def test_runs_lists_filters_and_pages_as_direct_mode_does(
    http: httpx.Client, deployment: Deployment
) -> None:
    ledger = str(deployment.ledger)
    waiting = [submit(http, "approval", {"ledger": ledger, "batch": "list"}) for _ in range(5)]
    for run_id in waiting:
        wait_for(http, run_id, "waiting")
    # By the database's clock: from the first of these runs on, and no earlier one.
    since = wait_for(http, waiting[0], "waiting")["created_at"] - 0.0005
    asked = ["--workflow", "approval", "--status", "waiting", "--status", "pending"]
    asked += ["--created-after", str(since), "--limit", "2", "--json"]

    def pages(env: dict[str, str | None], *more: str) -> list[dict[str, Any]]:
        found, cursor = [], None
        while True:
            paging = ["--before", cursor] if cursor else []
            result = cli(env, "runs", *asked, *more, *paging)
            assert result.exit_code == 0, result.output
            found.append(json.loads(result.stdout))
            if (cursor := found[-1]["next_cursor"]) is None:
                return found

    over_http = pages(remote_env(deployment))
    assert [len(page["runs"]) for page in over_http] == [2, 2, 1]
    listed = [run["id"] for page in over_http for run in page["runs"]]
    assert listed == list(reversed(waiting))  # newest first, none twice
    assert pages(direct_env(deployment), "--namespace", NAMESPACE) == over_http

    text = ["runs", "--workflow", "approval", "--created-after", str(since)]
    shown = cli(remote_env(deployment), *text)
    assert shown.exit_code == 0 and all(run_id in shown.stdout for run_id in waiting)
    assert cli(direct_env(deployment), *text, "--namespace", NAMESPACE).stdout == shown.stdout
    other = cli(remote_env(deployment), "runs", "--namespace", "elsewhere")
    assert other.exit_code != 0


def test_a_run_reads_the_same_over_http_and_from_the_database(
    http: httpx.Client, deployment: Deployment
) -> None:
    run_id = submit(http, "order", {"order": "same-1", "ledger": str(deployment.ledger)})
    wait_for(http, run_id, "succeeded")
    for args in (
        ["status", run_id],
        ["status", run_id, "--json"],
        ["events", run_id, "--json"],
        ["history", run_id],
        ["state", run_id, "--at", "2"],
        ["diff", run_id, "--from", "1", "--to", "3"],
        ["effects", run_id, "--json"],
    ):
        over_http = cli(remote_env(deployment), *args)
        direct = cli(direct_env(deployment), *args)
        assert over_http.exit_code == direct.exit_code == 0, (args, over_http.output)
        assert over_http.stdout == direct.stdout, args


def _unstamped(versions: dict[str, Any]) -> dict[str, Any]:
    """``cairn versions --json`` less each build's last announcement, which a worker
    renews every few seconds — between the two reads, now and then."""
    for build in versions.get("builds", []):
        build.pop("last_at", None)
    return versions


def test_versions_read_the_same_over_http_and_from_the_database(
    http: httpx.Client, deployment: Deployment
) -> None:
    ledger = str(deployment.ledger)
    for run_id in [submit(http, "approval", {"ledger": ledger}) for _ in range(2)]:
        wait_for(http, run_id, "waiting")
    over_http = cli(remote_env(deployment), "versions", "approval", "--json")
    direct = cli(direct_env(deployment), "versions", "approval", "--json", "--namespace", NAMESPACE)
    assert over_http.exit_code == direct.exit_code == 0, over_http.output
    assert _unstamped(json.loads(over_http.stdout)) == _unstamped(json.loads(direct.stdout))
    (approval,) = json.loads(over_http.stdout)["workflows"]
    (newest,) = [v for v in approval["versions"] if v["newest"]]
    assert newest["in_flight"] >= newest["waiting"] >= 2 and not newest["drained"]


def test_signal_cancel_and_rollback_over_http(http: httpx.Client, deployment: Deployment) -> None:
    ledger = str(deployment.ledger)
    approved, cancelled = (submit(http, "approval", {"ledger": ledger}) for _ in range(2))
    booking = submit(http, "booking", {"ledger": ledger})
    for run_id in (approved, cancelled, booking):
        wait_for(http, run_id, "waiting")
    env = remote_env(deployment)

    signalled = cli(env, "signal", approved, "approve", "--payload", '{"ok": 1}', "--id", "s-1")
    assert signalled.exit_code == 0 and signalled.stdout.startswith(approved), signalled.output
    again = cli(env, "signal", approved, "approve", "--id", "s-1")
    assert "already applied" in again.stdout
    wait_for(http, approved, "succeeded")
    stopped = cli(env, "cancel", cancelled, "--reason", "not needed")
    assert stopped.exit_code == 0 and stopped.stdout.split()[-1] in ("cancelling", "cancelled")
    wait_for(http, cancelled, "cancelled")

    plan = cli(env, "rollback", booking, "--reason", "customer left", "--plan")
    assert plan.exit_code == 0, plan.output
    assert "2 compensation(s)" in plan.stdout
    assert plan.stdout.index("charge#1") < plan.stdout.index("reserve#1")
    declined = cli(env, "rollback", booking, "--reason", "customer left", given="n\n")
    assert declined.exit_code == 1 and wait_for(http, booking, "waiting")
    done = cli(env, "rollback", booking, "--reason", "customer left", "--yes")
    assert done.exit_code == 0, done.output
    wait_for(http, booking, "rolled_back")
    events = http.get(f"/v1/runs/{booking}/events").json()["events"]
    asked = next(e for e in events if e["type"] == "rollback_requested")
    assert asked["data"]["actor"] == ACTOR


def test_runs_migrate_over_http_is_an_admins_and_records_its_key(
    http: httpx.Client, deployment: Deployment
) -> None:
    env = remote_env(deployment)
    registered_v1 = cli(env, "register", str(MIGRATIONS / "journey_v1.yaml"))
    assert registered_v1.exit_code == 0, registered_v1.output
    body = {"workflow": "journey", "input": {"kind": "review", "amount": 2}}
    started = http.post("/v1/runs", json=body)
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    wait_for(http, run_id, "waiting")
    assert cli(env, "register", str(MIGRATIONS / "journey_v2.yaml")).exit_code == 0
    move = ["runs", "migrate", "--from", "journey@1", "--to", "journey@2", "--map", MAPPING]

    assert http.post("/v1/principals", json={"name": "mover", "role": "operator"}).is_success
    operator = http.post("/v1/principals/mover/keys", json={}).json()["key"]
    refused = cli(remote_env(deployment, operator), *move, "--dry-run")
    assert isinstance(refused.exception, ApiError) and refused.exception.status == 403

    dry = cli(env, *move, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    (checked,) = json.loads(dry.stdout)["runs"]
    assert (checked["run_id"], checked["to_node"], checked["moved"]) == (run_id, "approval", False)
    moved = cli(env, *move, "--json")
    assert moved.exit_code == 0 and json.loads(moved.stdout)["moved"] == 1, moved.output
    run = http.get(f"/v1/runs/{run_id}").json()
    assert run.get("version") == 2, run
    events = http.get(f"/v1/runs/{run_id}/events").json()["events"]
    assert events[-1]["type"] == "run_migrated" and events[-1]["data"]["actor"] == ACTOR

    undone = cli(env, "runs", "migrate", "--rollback", run_id)
    assert undone.exit_code == 0 and "back on version 1, waiting" in undone.stdout, undone.output
    assert http.get(f"/v1/runs/{run_id}").json()["version"] == 1
    again = http.post(f"/v1/runs/{run_id}/migration/rollback", json={})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "not_migratable")


def test_a_forks_dry_run_and_a_replay_over_http(http: httpx.Client, deployment: Deployment) -> None:
    run_id = submit(http, "order", {"order": "dry-1", "ledger": str(deployment.ledger)})
    wait_for(http, run_id, "succeeded")
    env = remote_env(deployment)
    dry = cli(env, "fork", run_id, "--at", "1", "--json")
    assert dry.exit_code == 0, dry.output
    assert (json.loads(dry.stdout)["ending"], json.loads(dry.stdout)["went_well"]) == (
        "ended",
        True,
    )
    shown = cli(env, "fork", run_id, "--at", "1")
    assert "dry run of a fork of" in shown.stdout and "status: succeeded" in shown.stdout
    replayed = cli(env, "replay", run_id)
    assert replayed.exit_code == 0 and "2 same" in replayed.stdout, replayed.output


def test_a_flagged_effect_is_reconciled_and_resolved_from_the_command_line(
    http: httpx.Client, deployment: Deployment, service: Service
) -> None:
    run_id = submit(http, "order", {"order": "cli-3", "ledger": str(deployment.ledger)})
    wait_for(http, run_id, "succeeded")
    service.call("DELETE", "/charges/cli-3:charge")  # refunded by hand, outside cairn
    env = remote_env(deployment)
    drift = cli(env, "reconcile")
    assert drift.exit_code == 1  # something needs a person
    assert any(e["run_id"] == run_id for e in json.loads(drift.stdout)["needs_human"])
    resolved = cli(
        env, "resolve", run_id, "cli-3:charge", "--outcome", "compensated", "--note", "refunded"
    )
    assert resolved.exit_code == 0, resolved.output
    said = " ".join(resolved.stdout.split())
    assert "compensated (was flagged)" in said and ACTOR in said
    effects = json.loads(cli(env, "effects", run_id, "--json").stdout)
    charge = next(e for e in effects if e["key"] == "cli-3:charge")
    assert charge["resolution"]["note"] == "refunded"


def test_bulk_cancel_counts_then_cancels_exactly_those(
    http: httpx.Client, deployment: Deployment
) -> None:
    since = time.time() - 1
    ledger = str(deployment.ledger)
    counted = [submit(http, "approval", {"ledger": ledger, "batch": "bulk"}) for _ in range(3)]
    bystander = submit(http, "booking", {"ledger": ledger})
    for run_id in [*counted, bystander]:
        wait_for(http, run_id, "waiting")
    env = remote_env(deployment)
    asked = ["bulk", "cancel", "--workflow", "approval", "--status", "waiting"]
    asked += ["--created-after", str(since), "--reason", "campaign withdrawn"]

    declined = cli(env, *asked, given="n\n")
    assert declined.exit_code == 1, declined.output
    assert "3 run(s) selected" in declined.stdout
    assert all(run_id in declined.stdout for run_id in counted)
    assert all(wait_for(http, run_id, "waiting") for run_id in counted)  # nothing done

    done = cli(env, *asked, "--yes", "--json")
    assert done.exit_code == 0, done.output
    answer = json.loads(done.stdout)
    assert answer["dry_run"] is False
    assert sorted(e["run_id"] for e in answer["done"]) == sorted(counted)
    for run_id in counted:
        wait_for(http, run_id, "cancelled")
    assert wait_for(http, bystander, "waiting")


# -- refusals and imports ---------------------------------------------------------------------


def command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``cairn ARGS`` as the real script, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def plain_env(deployment: Deployment, key: str) -> dict[str, str]:
    base = {k: v for k, v in deployment.cluster.env.items() if not k.startswith("CAIRN_")}
    return {**base, "CAIRN_API_URL": deployment.base_url, "CAIRN_API_KEY": key}


def test_the_apis_refusals_are_one_line_and_no_traceback(
    http: httpx.Client, deployment: Deployment
) -> None:
    assert http.post("/v1/principals", json={"name": "looker", "role": "viewer"}).is_success
    viewer = http.post("/v1/principals/looker/keys", json={}).json()["key"]
    run_id = submit(http, "approval", {"ledger": str(deployment.ledger)})
    for key, args, status in (
        (viewer, ["cancel", run_id], "403"),
        ("cairn_wrong_key", ["status", run_id], "401"),
        (ADMIN, ["status", "no-such-run"], "404"),
        (ADMIN, ["sla"], None),
    ):
        done = command(plain_env(deployment, key), *args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        assert "Traceback" not in done.stderr
        if status is not None:
            assert f"HTTP {status}" in lines[0]
        else:
            assert "no remote form" in lines[0]


PROBE = """\
import atexit, json, sys
atexit.register(lambda: print("\\n" + json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv = ["cairn", *json.loads(sys.argv[1])]
from cairn.cli.main import main
main()
"""
# trio (installed here beside selenium), tornado (beside flower) and httpx's own command
# line are only probed for by the HTTP stack: a third of a remote command's start; the
# engine's model is the API's business, a remote command reads JSON.
NEVER_REMOTE = {
    "sqlalchemy", "psycopg", "celery", "kombu", "redis", "cairn.store.sql",
    "trio", "tornado", "httpx._main", "cairn.engine", "cairn.decider",
}  # fmt: skip


def test_remote_commands_import_no_database_nor_broker(
    http: httpx.Client, deployment: Deployment
) -> None:
    run_id = submit(http, "order", {"order": "imports-1", "ledger": str(deployment.ledger)})
    wait_for(http, run_id, "succeeded")
    for args in (["status", run_id], ["runs"], ["history", run_id], ["waiting"]):
        done = subprocess.run(
            [sys.executable, "-c", PROBE, json.dumps(args)],
            cwd=ROOT,
            env=plain_env(deployment, ADMIN),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (args, done.stderr)
        modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
        heavy = [n for n in NEVER_REMOTE if any(m == n or m.startswith(f"{n}.") for m in modules)]
        assert heavy == [], (args, heavy)
