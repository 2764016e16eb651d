"""Draining versions (docs/versions.md#draining-a-version) on the embedded runtime: runs
in flight counted per version, and the same report on ``GET /v1/versions``, on the
console's versions page and from ``cairn versions`` (over HTTP against PostgreSQL:
tests/integration/test_cli_remote.py). The report from its two reads:
tests/unit/test_versions.py."""

from __future__ import annotations

import json
import time
from typing import Any

from typer.testing import CliRunner

from cairn.cli.main import app as cli_app
from cairn.engine.versions import versions_of
from cairn.runtime import Runtime
from tests.embedded import test_console as shared
from tests.embedded.test_console import ADMIN, client, sign_in, waiting_run

runtime, keys, app = shared.runtime, shared.keys, shared.app


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
