"""Draining versions (docs/versions.md#draining-a-version): the report from its two reads,
and the same on ``GET /v1/versions``, on the console's versions page and from ``cairn
versions`` (the embedded runtime; over HTTP against PostgreSQL:
tests/integration/test_cli_remote.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from typer.testing import CliRunner

from cairn.cli.main import app as cli_app
from cairn.engine.retiring import needs
from cairn.engine.versions import OnBuild, assemble, versions_of
from cairn.model.builds import LiveBuild, Versioning
from cairn.runtime import Runtime
from cairn.store.versions import InFlight, Registered
from tests.unit import test_console as shared
from tests.unit.test_console import ADMIN, client, sign_in, waiting_run

runtime, keys, app = shared.runtime, shared.keys, shared.app


def test_each_version_says_what_of_it_is_in_flight_and_the_newest_is_where_runs_start() -> None:
    registered = [
        Registered("book", 1, 10.0),
        Registered("book", 2, 20.0),
        Registered("ship", 1, 5.0),
    ]
    in_flight = [
        InFlight("default", "book", 1, "b1", runs=2, waiting=2, oldest_at=12.0),
        InFlight("default", "book", 1, None, runs=1, waiting=0, oldest_at=11.0),  # unrouted
        InFlight("acme", "audit", 4, None, runs=1, waiting=0, oldest_at=30.0),  # shared with us
    ]
    shown = {w.workflow: w for w in assemble("default", registered, in_flight)}
    assert set(shown) == {"book", "ship", "acme/audit"}
    old, new = shown["book"].versions
    assert (old.version, old.in_flight, old.waiting, old.oldest_at, old.newest) == (
        1,
        3,
        2,
        11.0,
        False,
    )
    assert not old.drained and new.drained and new.newest and shown["book"].in_flight == 3
    assert old.builds == (OnBuild("b1", 2, 2, 12.0),)
    (theirs,) = shown["acme/audit"].versions
    assert theirs.registered_at is None and not theirs.newest and theirs.in_flight == 1
    assert shown["ship"].versions[0].to_dict() == {
        "version": 1, "registered_at": 5.0, "newest": True, "in_flight": 0, "waiting": 0,
        "oldest_at": None, "drained": True, "builds": [], "patches": [],
    }  # fmt: skip


def test_runs_in_flight_are_counted_per_version_and_finished_ones_are_not(runtime: Runtime) -> None:
    before = _gate(versions_of(runtime.orchestrator, "default", "gate"))
    waiting = [waiting_run(runtime) for _ in range(2)]
    runtime.orchestrator.cancel(waiting[0], reason="no longer needed", actor="test")
    deadline = time.monotonic() + 20
    while not runtime.orchestrator.get_run(waiting[0]).status.terminal:
        assert time.monotonic() < deadline, "the cancelled run never ended"
        time.sleep(0.02)
    after = _gate(versions_of(runtime.orchestrator, "default", "gate"))
    assert after["waiting"] == before["waiting"] + 1
    assert after["in_flight"] == before["in_flight"] + 1
    assert after["oldest_at"] is not None and after["newest"]
    assert versions_of(runtime.orchestrator, "elsewhere", "gate") == []


def test_the_api_the_page_and_the_command_line_show_the_same(
    app: Any, runtime: Runtime, keys: dict[str, str], monkeypatch: Any
) -> None:
    waiting_run(runtime)
    with runtime.store.transaction() as tx:  # a worker of another build announced itself
        tx.announce_build("elsewhere-7", ["gate@1"], [])
    with client(app) as http:
        read = http.get("/v1/versions?workflow=gate", headers={"Authorization": f"Bearer {ADMIN}"})
        assert read.status_code == 200, read.text
        (gate,) = read.json()["workflows"]
        built = {b["build"]: b for b in read.json()["builds"]}
        assert built["elsewhere-7"]["safe_to_retire"]  # gate routes by no build
        assert built["elsewhere-7"]["workflows"] == ["gate@1"]
        refused = http.get("/v1/versions", headers={"Authorization": "Bearer not-a-key"})
        assert refused.status_code == 401
        sign_in(http, keys["vic"])  # a viewer reads it too: counts, no payloads
        page = http.get("/console/versions")
        assert page.status_code == 200
        assert 'id="workflow-gate"' in page.text and 'data-version="1"' in page.text
        assert "<title>Versions · cairn console</title>" in page.text
        body = page.text.split("<main>", 1)[1]
        assert 'data-build="elsewhere-7"' in body and "safe to retire" in body
    monkeypatch.setenv("CAIRN_HOME", str(runtime.settings.home))
    monkeypatch.delenv("CAIRN_API_URL", raising=False)
    shown = CliRunner().invoke(cli_app, ["versions", "gate", "--json"])
    assert shown.exit_code == 0, shown.output
    (listed,) = json.loads(shown.stdout)["workflows"]
    assert listed["versions"][0]["version"] == gate["versions"][0]["version"]
    assert listed["in_flight"] == gate["in_flight"] >= 1


def _gate(shown: list[Any]) -> dict[str, Any]:
    (gate,) = shown
    (version,) = gate.versions
    return version.to_dict()


def test_a_build_is_needed_only_by_runs_that_no_other_live_build_may_run() -> None:
    key = "trip@1"
    v1 = LiveBuild("v1", frozenset({key}), first_at=1.0)
    v2 = LiveBuild("v2", frozenset({key}), frozenset({"v1"}), first_at=2.0)
    v3 = LiveBuild("v3", frozenset({"other@1"}), frozenset({"v1"}), first_at=3.0)
    assert needs(Versioning.PINNED, "v1", [v1, v2], key)  # pinned: its own build, always
    assert not needs(Versioning.AUTO_UPGRADE, "v1", [v1, v2], key)  # v2 takes it over
    assert needs(Versioning.AUTO_UPGRADE, "v1", [v1], key)  # nobody else may
    assert needs(Versioning.AUTO_UPGRADE, "v1", [v1, v3], key)  # v3 does not run trip@1
    assert not needs(Versioning.ANY, "v1", [v1], key)  # any worker of its queue
