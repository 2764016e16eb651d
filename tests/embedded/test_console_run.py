"""The run page's artifacts, anomalies and forks, fork after a dry run, and the runs
page's bulk actions, without a browser (the embedded runtime): an artifact downloads
only with the payloads permission; an anomaly's scene shows only with it; the dry run's
page shows where the fork parts from the run and offers the live fork to an operator,
whose fork then shows among the run's forks; a bulk cancel counts the runs first, then
acts on exactly those; a principal without the permission sees no form and its POST by
hand gets 403 with nothing written. In a real browser: tests/browser/test_console.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cairn.api.app import create_app
from cairn.config import Settings
from cairn.model.principals import Role
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.embedded.test_console import client, csrf_of, sign_in
from tests.support.cluster import WORKFLOWS
from tests.support.principals import mint_keys

ADMIN = "console-run-admin-key-0123456789"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    tmp = tmp_path_factory.mktemp("console-run")
    names = ("artifacts", "anomaly_agent", "console_gate")
    flows = [str(WORKFLOWS / f"{name}.yaml") for name in names]
    settings = Settings(home=tmp / "home", workflows=flows, api_keys=f"default:{ADMIN}")
    built = Runtime.build(settings, concurrency=2)
    built.start_workers()
    try:
        yield built
    finally:
        built.close()


@pytest.fixture(scope="module")
def keys(runtime: Runtime) -> dict[str, str]:
    """otto: an operator who reads payloads; vic: a viewer who does not."""
    return mint_keys(runtime.store, {"otto": (Role.OPERATOR, True), "vic": (Role.VIEWER, False)})


@pytest.fixture(scope="module")
def app(runtime: Runtime) -> Any:
    return create_app(runtime.settings, runtime)


def finished(runtime: Runtime, workflow: str, inputs: dict[str, Any]) -> str:
    run_id = runtime.orchestrator.submit(workflow, inputs)
    deadline = time.monotonic() + 30
    while not runtime.orchestrator.get_run(run_id).status.terminal:
        assert time.monotonic() < deadline, f"run {run_id} of {workflow} never ended"
        time.sleep(0.02)
    return run_id


def audited(runtime: Runtime, actor: str, action: str) -> set[str]:
    with runtime.store.reading() as tx:
        entries = tx.audit_entries("default", filters={"actor": actor}, limit=1000)
    return {e.outcome for e in entries if e.action == action}


def test_artifacts_download_only_with_the_payloads_permission(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = finished(runtime, "artifacts", {"topic": "cairns"})
    link = f"/console/runs/{run_id}/artifacts/content?name=draft&amp;version=1"
    with client(app) as http:
        sign_in(http, keys["otto"])
        page = http.get(f"/console/runs/{run_id}")
        assert page.status_code == 200
        assert 'data-name="summary"' in page.text and "test-model-1" in page.text
        assert link in page.text
        got = http.get(link.replace("&amp;", "&"))
        assert got.status_code == 200 and got.content == b"A draft about cairns.\n"
        assert got.headers["content-disposition"] == 'attachment; filename="draft.v1"'
    with client(app) as http:
        sign_in(http, keys["vic"])
        page = http.get(f"/console/runs/{run_id}")
        assert 'data-name="draft"' in page.text and "Download" not in page.text
        refused = http.get(link.replace("&amp;", "&"))
        assert refused.status_code == 403 and "cairns" not in refused.text
    assert audited(runtime, "key:vic", "run.artifact") == {"refused"}
    assert audited(runtime, "key:otto", "run.artifact") == {"ok"}


def test_an_anomaly_shows_its_scene_only_with_the_payloads_permission(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = finished(runtime, "anomaly_agent", {"question": "what is cairn?"})
    assert runtime.orchestrator.get_run(run_id).status is RunStatus.FAILED
    with client(app) as http:
        sign_in(http, keys["otto"])
        page = http.get(f"/console/runs/{run_id}").text
        assert "no_progress" in page and "The scene, as it was caught" in page
        assert "think@" in page and "search" in page  # the moves and the tool calls
    with client(app) as http:
        sign_in(http, keys["vic"])
        page = http.get(f"/console/runs/{run_id}").text
        assert "no_progress" in page and "The scene, as it was caught" not in page
        assert "the same query" not in page
        assert http.get(f"/v1/runs/{run_id}/anomalies").status_code in (401, 403)


def test_fork_after_a_dry_run_shows_the_divergence_then_starts_for_an_operator(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = finished(runtime, "anomaly_agent", {"question": "what is cairn?"})
    patch = '{"progress": true, "answer_after": 2}'
    with client(app) as http:
        sign_in(http, keys["vic"])  # a viewer: no form, and its POSTs by hand refused
        page = http.get(f"/console/runs/{run_id}")
        assert 'id="dry-run"' not in page.text
        token = csrf_of(page.text)
        for path in ("fork/dry-run", "fork"):
            data = {"csrf": token, "at_seq": "1", "patch": patch, "confirm": "yes"}
            refused = http.post(f"/console/runs/{run_id}/{path}", data=data)
            assert refused.status_code == 403, (path, refused.text)
    with client(app) as http:
        sign_in(http, keys["otto"])
        page = http.get(f"/console/runs/{run_id}")
        assert 'id="dry-run"' in page.text
        no_csrf = http.post(f"/console/runs/{run_id}/fork", data={"at_seq": "1", "confirm": "yes"})
        assert no_csrf.status_code == 403
        tried = http.post(
            f"/console/runs/{run_id}/fork/dry-run",
            data={"csrf": csrf_of(page.text), "at_seq": "1", "patch": patch},
        )
        assert tried.status_code == 200, tried.text
        assert 'id="dry-status">succeeded' in tried.text and "It went well." in tried.text
        assert "It parts from the run's path at step 4." in tried.text  # act: done, not think
        assert 'id="confirm-fork"' in tried.text
        with runtime.store.reading() as tx:
            assert tx.forks_of("default", run_id, 10) == []  # a dry run writes nothing
        bad = http.post(
            f"/console/runs/{run_id}/fork/dry-run",
            data={"csrf": csrf_of(page.text), "at_seq": "1", "patch": "[1]"},
        )
        assert bad.status_code == 422 and "JSON object" in bad.text
        started = http.post(
            f"/console/runs/{run_id}/fork",
            data={"csrf": csrf_of(tried.text), "at_seq": "1", "patch": patch, "confirm": "yes"},
        )
        assert started.status_code == 303, started.text
        fork_id = started.headers["location"].rsplit("/", 1)[1]
        page = http.get(f"/console/runs/{run_id}")
        assert f'href="/console/runs/{fork_id}"' in page.text
    forked = runtime.orchestrator.get_run(fork_id)
    assert forked.parent_run_id == run_id and forked.fork_seq == 1
    with runtime.store.reading() as tx:
        assert [f["run_id"] for f in tx.forks_of("default", run_id, 10)] == [fork_id]
    assert audited(runtime, "key:vic", "run.fork") == {"refused"}
    assert audited(runtime, "key:vic", "run.dry_run") == {"refused"}
    assert audited(runtime, "key:otto", "run.fork") == {"ok"}


def waiting_runs(runtime: Runtime, count: int) -> list[str]:
    made = [runtime.orchestrator.submit("console_gate", {}) for _ in range(count)]
    deadline = time.monotonic() + 30
    for run_id in made:
        while runtime.orchestrator.get_run(run_id).status is not RunStatus.WAITING:
            assert time.monotonic() < deadline, "the run never came to its wait"
            time.sleep(0.02)
    return made


def test_a_bulk_cancel_counts_first_then_cancels_exactly_those_runs(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    made = waiting_runs(runtime, 3)
    filtered = "/console/runs?status=waiting&workflow=console_gate"
    with client(app) as http:
        sign_in(http, keys["vic"])  # a viewer: no bulk form, its POST by hand refused
        page = http.get(filtered)
        assert 'id="bulk-form"' not in page.text and "in default" in page.text
        refused = http.post(
            "/console/runs/bulk",
            data={"csrf": csrf_of(page.text), "action": "cancel", "statuses": "waiting"},
        )
        assert refused.status_code == 403
    assert all(runtime.orchestrator.get_run(r).status is RunStatus.WAITING for r in made)
    assert audited(runtime, "key:vic", "bulk.cancel") == {"refused"}
    with client(app) as http:
        sign_in(http, keys["otto"])
        page = http.get(filtered)
        assert 'id="bulk-form"' in page.text
        asked = {
            "csrf": csrf_of(page.text),
            "action": "cancel",
            "statuses": "waiting",
            "workflow": "console_gate",
            "reason": "the campaign is over",
        }
        counted = http.post("/console/runs/bulk", data=asked)
        assert counted.status_code == 200, counted.text
        assert re.search(
            r'This will cancel <strong id="bulk-matched">3</strong> runs', counted.text
        )
        assert all(runtime.orchestrator.get_run(r).status is RunStatus.WAITING for r in made)
        selection = re.search(r'name="selection" value="([^"]+)"', counted.text)
        assert selection is not None
        waiting_runs(runtime, 1)  # the filter now selects another run: nothing done
        changed = http.post(
            "/console/runs/bulk", data={**asked, "selection": selection[1], "confirm": "yes"}
        )
        assert changed.status_code == 409 and "count them again" in changed.text
        assert all(runtime.orchestrator.get_run(r).status is RunStatus.WAITING for r in made)
        counted = http.post("/console/runs/bulk", data=asked)
        selection = re.search(r'name="selection" value="([^"]+)"', counted.text)
        assert selection is not None
        done = http.post(
            "/console/runs/bulk", data={**asked, "selection": selection[1], "confirm": "yes"}
        )
        assert done.status_code == 200 and "Done: 4 of 4 runs" in done.text
    deadline = time.monotonic() + 20
    while not all(runtime.orchestrator.get_run(r).status.terminal for r in made):
        assert time.monotonic() < deadline, "the runs were not cancelled"
        time.sleep(0.02)
    assert {runtime.orchestrator.get_run(r).status for r in made} == {RunStatus.CANCELLED}
    assert audited(runtime, "key:otto", "bulk.cancel") >= {"ok"}
