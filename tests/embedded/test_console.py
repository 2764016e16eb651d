"""The console without a browser (its pages over HTTP, against the embedded runtime): the
security headers on every answer, sign-in with a key and its session (HTTP-only cookie,
only a digest stored, expiry, sign-out), the CSRF token every form needs (403, nothing
written), the permissions (a button a role lacks is not shown; the POST by hand is 403,
nothing written), the payloads a principal may not read kept off every page, and a
decision held to its wait's schema. In a real browser: tests/browser/."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cairn.api.app import create_app
from cairn.config import Settings
from cairn.console.sessions import COOKIE, digest, start_session
from cairn.model.principals import Principal, Role
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.testing.clock import FakeClock
from tests.support.principals import mint_keys

ADMIN = "console-admin-key-0123456789"
SECRET = "s3cret-answer-nobody-else-reads"
FLOW = """
name: gate
version: 1
start: draft
nodes:
  draft:  {handler: "tests.integration.handlers:step", next: review}
  review: {wait: {signals: {approve: publish, reject: rejected}, timeout: 1h,
                  on_timeout: rejected, approvers: ["role:approver"],
                  response: {approve: {type: object, required: [answer],
                                       properties: {answer: {type: string, maxLength: 20}},
                                       additionalProperties: false}}}}
  publish: {handler: "tests.integration.handlers:step", next: done}
  done:    {end: succeeded}
  rejected: {end: failed}
"""


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    tmp = tmp_path_factory.mktemp("console")
    (tmp / "gate.yaml").write_text(FLOW)
    settings = Settings(
        home=tmp / "home", workflows=[str(tmp / "gate.yaml")], api_keys=f"default:{ADMIN}"
    )
    built = Runtime.build(settings, concurrency=2)
    built.start_workers()
    try:
        yield built
    finally:
        built.close()


@pytest.fixture(scope="module")
def keys(runtime: Runtime) -> dict[str, str]:
    """An approver that reads payloads (ann), a viewer that does not (vic), an operator."""
    return mint_keys(
        runtime.store,
        {"ann": (Role.APPROVER, True), "vic": (Role.VIEWER, False), "ops": (Role.OPERATOR, False)},
    )


@pytest.fixture(scope="module")
def app(runtime: Runtime) -> Any:
    return create_app(runtime.settings, runtime)


def client(app: Any) -> TestClient:
    return TestClient(app, follow_redirects=False)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def sign_in(http: TestClient, key: str) -> None:
    form = http.get("/console/sign-in")
    answer = http.post(
        "/console/sign-in", data={"csrf": csrf_of(form.text), "key": key, "next": "/console/runs"}
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console/runs"


def waiting_run(runtime: Runtime) -> str:
    run_id = runtime.orchestrator.submit("gate", {})
    deadline = time.monotonic() + 20
    while runtime.orchestrator.get_run(run_id).status is not RunStatus.WAITING:
        assert time.monotonic() < deadline, "the run never came to its wait"
        time.sleep(0.02)
    return run_id


def signals_of(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e for e in runtime.orchestrator.events(run_id) if e["type"] == "signal_received"]


def test_every_console_answer_carries_the_security_headers(app: Any) -> None:
    with client(app) as http:
        for path in ("/console/runs", "/console/sign-in", "/console/static/console.js"):
            answer = http.get(path)
            csp = answer.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
            assert "frame-ancestors 'none'" in csp
            assert answer.headers["x-frame-options"] == "DENY"
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "same-origin"
        assert http.get("/console/runs").headers["location"].startswith("/console/sign-in")
        # No inline script or style in a page: only the one script file.
        page = http.get("/console/sign-in").text
        assert re.findall(r"<script[^>]*>", page) == [
            '<script src="/console/static/console.js" defer>'
        ]
        assert "style=" not in page and "<style" not in page
        assert "content-security-policy" not in http.get("/healthz").headers


def test_a_key_signs_in_to_a_session_kept_as_a_digest_and_signed_out(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    with client(app) as http:
        form = http.get("/console/sign-in")
        wrong = http.post(
            "/console/sign-in", data={"csrf": csrf_of(form.text), "key": "not-a-key-at-all-00"}
        )
        assert wrong.status_code == 401 and "not valid" in wrong.text
        assert COOKIE not in http.cookies
        refused = http.post("/console/sign-in", data={"csrf": "forged", "key": keys["ann"]})
        assert refused.status_code == 403 and COOKIE not in http.cookies
        sign_in(http, keys["ann"])
        cookie = next(c for c in http.cookies.jar if c.name == COOKIE)
        assert cookie.has_nonstandard_attr("HttpOnly") and cookie.path == "/console"
        with runtime.store.reading() as tx:
            assert tx.session(digest(str(cookie.value))) is not None  # found by its digest
        page = http.get("/console/runs")
        assert page.status_code == 200 and "key:ann" in page.text
        out = http.post("/console/sign-out", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303
        with runtime.store.reading() as tx:
            assert tx.session(digest(str(cookie.value))) is None
        http.cookies.set(COOKIE, str(cookie.value), path="/console")
        assert http.get("/console/runs").status_code == 303  # the old cookie: sign in again


def test_a_session_expires(app: Any, runtime: Runtime, wall_clock: FakeClock) -> None:
    who = Principal("brief", "default", Role.VIEWER)
    session = start_session(runtime.store, who, lifetime_s=0.3)
    with client(app) as http:
        http.cookies.set(COOKIE, session.token, path="/console")
        assert http.get("/console/runs").status_code == 200
        wall_clock.advance(0.5)  # the database's clock (SQLite: this process's)
        gone = http.get("/console/runs")
        assert gone.status_code == 303 and "/console/sign-in" in gone.headers["location"]


def test_a_form_without_its_csrf_token_is_refused_and_writes_nothing(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = waiting_run(runtime)
    with client(app) as http:
        sign_in(http, keys["ann"])
        for token in (None, "", "0" * 64):
            data = {"signal": "approve", "node": "review", "payload": '{"answer": "x"}'}
            if token is not None:
                data["csrf"] = token
            refused = http.post(f"/console/runs/{run_id}/signal", data=data)
            assert refused.status_code == 403, refused.text
            assert "CSRF" in refused.text
    assert signals_of(runtime, run_id) == []
    assert runtime.orchestrator.get_run(run_id).status is RunStatus.WAITING


def test_a_viewer_sees_no_button_and_its_post_by_hand_is_refused(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = waiting_run(runtime)
    with client(app) as http:
        sign_in(http, keys["vic"])
        page = http.get(f"/console/runs/{run_id}")
        assert page.status_code == 200
        assert 'value="approve"' not in page.text and "Cancel the run" not in page.text
        assert "Roll back" not in page.text
        token = csrf_of(page.text)  # the sign-out form's: a valid session's token
        for path, data in (
            ("signal", {"signal": "approve", "node": "review", "payload": '{"answer": "x"}'}),
            ("cancel", {"reason": "no"}),
            ("rollback", {"reason": "no", "confirm": "yes"}),
        ):
            refused = http.post(f"/console/runs/{run_id}/{path}", data={"csrf": token, **data})
            assert refused.status_code == 403, (path, refused.text)
    assert signals_of(runtime, run_id) == []
    assert runtime.orchestrator.get_run(run_id).status is RunStatus.WAITING
    with runtime.store.reading() as tx:
        entries = tx.audit_entries("default", filters={"actor": "key:vic"}, limit=1000)
    refused_actions = {e.action for e in entries if e.outcome == "refused"}
    assert {"run.signal", "run.cancel", "run.rollback"} <= refused_actions


def test_an_answer_outside_the_schema_is_shown_and_not_written_and_one_within_it_is(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = waiting_run(runtime)
    with client(app) as http:
        sign_in(http, keys["ann"])
        page = http.get(f"/console/runs/{run_id}")
        assert 'value="approve"' in page.text
        token = csrf_of(page.text)
        base = {"csrf": token, "signal": "approve", "node": "review", "comment": "fine"}
        too_long = http.post(
            f"/console/runs/{run_id}/signal",
            data={**base, "payload": json.dumps({"answer": SECRET})},
        )
        assert too_long.status_code == 422
        assert "schema" in too_long.text and 'role="alert"' in too_long.text
        not_json = http.post(f"/console/runs/{run_id}/signal", data={**base, "payload": "{"})
        assert not_json.status_code == 422 and "not JSON" in not_json.text
        assert signals_of(runtime, run_id) == []
        done = http.post(
            f"/console/runs/{run_id}/signal", data={**base, "payload": '{"answer": "ship it"}'}
        )
        assert done.status_code == 303, done.text
    (signal,) = signals_of(runtime, run_id)
    assert signal["data"]["actor"] == "key:ann"
    assert signal["data"]["comment"] == "fine"
    assert signal["data"]["payload"] == {"answer": "ship it"}
    with runtime.store.reading() as tx:
        entries = tx.audit_entries("default", filters={"actor": "key:ann"}, limit=1000)
    assert any(e.action == "run.signal" and e.outcome == "ok" for e in entries)


def test_nothing_shows_a_payload_to_a_principal_without_the_permission(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = waiting_run(runtime)
    runtime.orchestrator.signal(
        run_id, "reject", {"why": SECRET}, actor="key:ann", role="approver", comment="no"
    )
    with client(app) as http:
        sign_in(http, keys["ann"])
        assert SECRET in http.get(f"/console/runs/{run_id}").text  # ann may read it
    with client(app) as http:
        sign_in(http, keys["vic"])
        for path in ("", "/live", "/rollback"):
            page = http.get(f"/console/runs/{run_id}{path}")
            assert page.status_code == 200, path
            assert SECRET not in page.text, path
        assert "may not read them" in http.get(f"/console/runs/{run_id}").text
        state = http.get(f"/console/runs/{run_id}/state?at=1")
        assert state.status_code == 403 and SECRET not in state.text
        assert "State at a seq" not in http.get(f"/console/runs/{run_id}").text


def test_the_runs_page_filters_counts_and_pages(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    waiting_run(runtime)
    with client(app) as http:
        sign_in(http, keys["ann"])
        page = http.get("/console/runs?status=waiting")
        assert page.status_code == 200
        assert re.search(r"waiting</span> <span class=\"count\">[1-9]", page.text)
        mine = http.get("/console/runs?mine=1")
        assert mine.status_code == 200 and "gate@1" in mine.text
        assert http.get("/console/runs?status=bogus").status_code == 422
        inbox = http.get("/console/inbox")
        assert inbox.status_code == 200 and "review" in inbox.text
    with client(app) as http:
        sign_in(http, keys["vic"])  # a viewer decides nothing
        assert "Nothing waits for you" in http.get("/console/inbox").text


def test_the_fleet_page_pauses_and_resumes_a_schedule_for_whoever_may(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    with client(app) as http:
        added = http.post(
            "/v1/schedules",
            json={"name": "nightly", "cron": "0 3 * * *", "workflow": "gate", "paused": False},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert added.status_code == 201, added.text
        sign_in(http, keys["vic"])
        page = http.get("/console/fleet")
        assert page.status_code == 200 and "nightly" in page.text
        assert "pause-nightly" not in page.text  # a viewer has no button
        refused = http.post("/console/schedules/nightly/pause", data={"csrf": csrf_of(page.text)})
        assert refused.status_code == 403
        assert http.get("/console/audit").status_code == 403  # admins only
    assert not runtime.orchestrator.schedules.get("default", "nightly").paused
    with client(app) as http:
        sign_in(http, keys["ops"])
        page = http.get("/console/fleet")
        assert 'id="pause-nightly"' in page.text
        done = http.post("/console/schedules/nightly/pause", data={"csrf": csrf_of(page.text)})
        assert done.status_code == 303
        assert runtime.orchestrator.schedules.get("default", "nightly").paused
        page = http.get("/console/fleet")
        http.post("/console/schedules/nightly/resume", data={"csrf": csrf_of(page.text)})
    assert not runtime.orchestrator.schedules.get("default", "nightly").paused
    with client(app) as http:
        sign_in(http, ADMIN)
        audit = http.get("/console/audit?actor=key:ops")
        assert audit.status_code == 200
        assert "schedule.change" in audit.text and "console.sign_in" in audit.text


def test_the_session_cookie_is_secure_over_https(app: Any, keys: dict[str, str]) -> None:
    with TestClient(app, base_url="https://console.test", follow_redirects=False) as http:
        form = http.get("/console/sign-in")
        answer = http.post(
            "/console/sign-in", data={"csrf": csrf_of(form.text), "key": keys["vic"]}
        )
        assert answer.status_code == 303
        cookie = answer.headers["set-cookie"]
        assert f"{COOKIE}=" in cookie and "Secure" in cookie and "HttpOnly" in cookie
        assert "SameSite=lax" in cookie
