"""The console in a real browser (headless chromium), on real services: ``cairn api`` as a
subprocess with a Celery worker and the scheduler (one deployment, one browser for the
module). An approver signs in, finds the waiting run in the inbox, answers within the
schema and approves with a comment, and the run page that was open all along shows the
decision under the approver's name and the next node running, without a reload; a
viewer sees no approve button and the same POST by hand is refused, nothing written; an
operator rolls a run back after the page lists its compensations; a model's streamed
text appears on the run page as it arrives; an operator settles a held node from the
inbox; the fleet page shows the worker running a node and that node stalled; an
operator forks a run after its dry run shows where the fork parts from it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn.testing.model_server import ModelServer, Reply
from tests.browser.conftest import screenshot
from tests.integration.test_lease_metrics import free_ports
from tests.support.api_server import Deployment, api_deployment, bearer, mint_keys_over_http
from tests.support.oidc import running_provider

OIDC_SECRET = "console-oidc-secret"
ADMIN = "console-browser-admin-key-0123456789"
SESSION_COOKIE = "cairn_session"


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def deployment(
    pg_template: str, tmp_path_factory: pytest.TempPathFactory, model: ModelServer
) -> Iterator[Deployment]:
    """The API signs people in with a key, or through the stand-in identity provider
    (its users: ada an admin, alice an approver, nobody in no mapped group)."""
    tmp = tmp_path_factory.mktemp("console-browser")
    (port,) = free_ports(1)
    callback = f"http://127.0.0.1:{port}/console/oidc/callback"
    with (
        running_provider(callback, client_secret=OIDC_SECRET) as issuer,
        api_deployment(
            pg_template,
            tmp,
            env={"MODEL_URL": model.url},
            api_env={
                "CAIRN_API_KEYS": f"default:{ADMIN}",
                "CAIRN_OIDC_ISSUER": issuer,
                "CAIRN_OIDC_CLIENT_ID": "cairn",
                "CAIRN_OIDC_CLIENT_SECRET": OIDC_SECRET,
                "CAIRN_OIDC_REDIRECT_URL": callback,
                "CAIRN_OIDC_ROLES": "cairn-admins=admin,cairn-approvers=approver",
            },
            port=port,
        ) as live,
    ):
        yield live


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.base_url, timeout=20) as client:
        yield client


@pytest.fixture(scope="module")
def keys(http: httpx.Client) -> dict[str, str]:
    """ann: an approver who reads payloads; vic: a viewer; ops: an operator."""
    principals = {"ann": ("approver", True), "vic": ("viewer", False), "ops": ("operator", True)}
    return mint_keys_over_http(http, principals, ADMIN)


def until(
    check: Callable[[], Any],
    what: str,
    timeout_s: float = 30.0,
    shown: Callable[[], str] | None = None,
) -> Any:
    """``check()`` once it is truthy; a failure names ``what`` and, if given, what
    ``shown()`` says was there instead."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = check()
        except Exception:  # an element not there yet, or swapped out under us
            found = None
        if found:
            return found
        if time.monotonic() >= deadline:
            instead = ""
            with contextlib.suppress(Exception):
                instead = f"; instead: {shown()[:2000]}" if shown else ""
            raise AssertionError(f"timed out waiting for {what}{instead}")
        time.sleep(0.05)


def start(http: httpx.Client, workflow: str, **inputs: Any) -> str:
    body = {"workflow": workflow, "input": inputs}
    started = http.post("/v1/runs", json=body, headers=bearer(ADMIN))
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def run_of(http: httpx.Client, run_id: str) -> dict[str, Any]:
    return dict(http.get(f"/v1/runs/{run_id}", headers=bearer(ADMIN)).json())


def waiting(http: httpx.Client, run_id: str) -> dict[str, Any]:
    return dict(until(lambda: (r := run_of(http, run_id))["waiting"] and r, "the run's wait"))


def signals(http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    events = http.get(f"/v1/runs/{run_id}/events", headers=bearer(ADMIN)).json()["events"]
    return [e for e in events if e["type"] == "signal_received"]


def sign_in(driver: Any, base: str, key: str) -> None:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    driver.delete_all_cookies()
    driver.get(f"{base}/console/sign-in")
    screenshot(driver, "sign-in")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.ID, "sign-in").click()
    until(
        lambda: driver.find_elements(By.CSS_SELECTOR, "form.who"),
        "the signed-in page",
        shown=lambda: f"{driver.current_url}: {driver.find_element(By.TAG_NAME, 'body').text}",
    )


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def test_an_approver_decides_from_the_inbox_and_the_open_run_page_follows_live(
    browser: Any, deployment: Deployment, http: httpx.Client, keys: dict[str, str]
) -> None:
    driver, base = browser, deployment.base_url
    run_id = start(http, "console_gate", slow={"publish": 4})
    waiting(http, run_id)
    sign_in(driver, base, keys["ann"])

    # The run page, open before the decision (it must follow it without a reload).
    driver.get(f"{base}/console/runs/{run_id}")
    until(lambda: css(driver, "#run[data-following=yes]"), "the page to follow its stream")
    driver.execute_script("window.keptAcrossTheDecision = 'the same page';")
    screenshot(driver, "run-waiting")
    watching = driver.current_window_handle

    driver.switch_to.new_window("tab")
    driver.get(f"{base}/console/inbox")
    screenshot(driver, "inbox")
    (card,) = [c for c in css(driver, "article.wait") if run_id[:8] in c.text]
    assert "review" in card.text and "draft done" in card.text  # its context
    css(card, "a.button")[0].click()
    until(lambda: css(driver, "form.decide"), "the decision form")

    # An answer outside the schema: shown, nothing written.
    css(driver, "#payload-review")[0].send_keys('{"answer": "' + "x" * 41 + '"}')
    css(driver, "#comment-review")[0].send_keys("Reads well; ship it.")
    css(driver, "button[value=approve]")[0].click()
    error = until(lambda: [e.text for e in css(driver, "#action-error")], "the refusal")[0]
    assert "schema" in error
    assert signals(http, run_id) == []
    payload = css(driver, "#payload-review")[0]
    payload.clear()
    payload.send_keys('{"answer": "ship it, edited"}')
    css(driver, "button[value=approve]")[0].click()
    until(lambda: signals(http, run_id), "the decision")

    driver.switch_to.window(watching)
    # (Texts read at once: the live part is swapped whenever the run moves.)
    decision = until(
        lambda: [d.text for d in css(driver, "#decisions .decision") if "key:ann" in d.text],
        "the decision on the open page",
    )[0]
    assert "Reads well; ship it." in decision and "ship it, edited" in decision
    until(
        lambda: css(driver, 'g[data-node="publish"][data-state="running"]'),
        "the next node running, on the open page",
    )
    screenshot(driver, "run-live")
    assert driver.execute_script("return window.keptAcrossTheDecision") == "the same page"
    until(lambda: css(driver, "#run-status.s-succeeded"), "the run's end, live")
    (signal,) = signals(http, run_id)
    assert signal["data"]["actor"] == "key:ann"
    assert signal["data"]["payload"] == {"answer": "ship it, edited"}
    for handle in driver.window_handles:  # one tab for the next test
        if handle != watching:
            driver.switch_to.window(handle)
            driver.close()
    driver.switch_to.window(watching)


def test_a_viewer_has_no_approve_button_and_its_post_by_hand_is_refused(
    browser: Any, deployment: Deployment, http: httpx.Client, keys: dict[str, str]
) -> None:
    driver, base = browser, deployment.base_url
    run_id = start(http, "console_gate")
    waiting(http, run_id)
    sign_in(driver, base, keys["vic"])
    driver.get(f"{base}/console/runs/{run_id}")
    until(lambda: css(driver, "#run"), "the run page")
    screenshot(driver, "run-viewer")
    assert css(driver, "button[value=approve]") == [] and css(driver, "form.decide") == []
    assert "may not read them" in driver.page_source  # model calls: payloads

    # The same POST, made by hand with the viewer's live session and its CSRF token.
    token = css(driver, "form.who input[name=csrf]")[0].get_attribute("value")
    cookie = driver.get_cookie(SESSION_COOKIE)["value"]
    refused = httpx.post(
        f"{base}/console/runs/{run_id}/signal",
        data={
            "csrf": token,
            "signal": "approve",
            "node": "review",
            "payload": '{"answer": "by hand"}',
        },
        cookies={SESSION_COOKIE: cookie},
        follow_redirects=False,
    )
    assert refused.status_code == 403, refused.text
    assert signals(http, run_id) == []
    assert run_of(http, run_id)["status"] == "waiting"


def test_an_operator_rolls_back_after_the_page_lists_the_compensations(
    browser: Any, deployment: Deployment, http: httpx.Client, keys: dict[str, str]
) -> None:
    driver, base = browser, deployment.base_url
    run_id = start(http, "console_saga")
    waiting(http, run_id)
    sign_in(driver, base, keys["ops"])
    driver.get(f"{base}/console/runs/{run_id}")
    css(driver, "#rollback")[0].click()
    listed = until(lambda: css(driver, "#compensations li"), "the compensations")
    assert [item.text.split()[0] for item in listed] == ["charge", "reserve"]
    screenshot(driver, "rollback")
    css(driver, "#reason")[0].send_keys("the customer withdrew the order")
    css(driver, "#confirm-rollback")[0].click()
    until(lambda: css(driver, "#run-status.s-rolled_back"), "the run rolled back, live")
    assert run_of(http, run_id)["status"] == "rolled_back"
    driver.get(
        f"{base}/console/runs/{run_id}/state?at=2&from=1&to={run_of(http, run_id)['last_seq']}"
    )
    screenshot(driver, "state")


def test_streamed_model_text_appears_as_it_arrives(
    browser: Any,
    deployment: Deployment,
    http: httpx.Client,
    keys: dict[str, str],
    model: ModelServer,
) -> None:
    driver, base = browser, deployment.base_url
    words = [f"word{n}" for n in range(40)]
    # Held back a moment first: the page is open and following before the first word.
    model.script(Reply(text=" ".join(words), chunk_delay_s=0.1, delay_s=2.0))
    sign_in(driver, base, keys["ann"])
    run_id = start(http, "model_stream", turns=1)
    driver.get(f"{base}/console/runs/{run_id}")
    until(lambda: css(driver, "#run[data-following=yes]"), "the page to follow its stream")
    seen: list[str] = []

    def more() -> bool:
        blocks = css(driver, "#chunks pre.chunks")
        text = blocks[0].text if blocks else ""
        if text and (not seen or text != seen[-1]):
            seen.append(text)
        return len(seen) >= 3

    until(more, "the streamed text to grow", timeout_s=20)
    screenshot(driver, "run-streaming")
    assert len(seen[0].split()) < len(words)  # shown before the answer was whole
    until(lambda: css(driver, "#run-status.s-succeeded"), "the run's end")
    whole = css(driver, "#chunks pre.chunks")[0].text
    assert whole.split() == words


def test_an_operator_pauses_a_schedule_and_an_admin_reads_the_audit_log(
    browser: Any, deployment: Deployment, http: httpx.Client, keys: dict[str, str]
) -> None:
    driver, base = browser, deployment.base_url
    body = {"name": "nightly-digest", "cron": "0 3 * * *", "workflow": "console_gate"}
    added = http.post("/v1/schedules", json=body, headers=bearer(ADMIN))
    assert added.status_code == 201, added.text
    sign_in(driver, base, keys["ops"])
    driver.get(f"{base}/console/fleet")
    css(driver, "#pause-nightly-digest")[0].click()
    until(lambda: css(driver, "#resume-nightly-digest"), "the schedule paused")
    screenshot(driver, "fleet")
    driver.get(f"{base}/console/runs")
    screenshot(driver, "runs")  # (last: the module's runs are all there)
    driver.get(f"{base}/console/versions")
    (gate,) = until(lambda: css(driver, "#workflow-console_gate"), "the workflow's versions")
    assert "in flight" in gate.text and "console_gate@1" in gate.text, gate.text
    screenshot(driver, "versions")
    schedule = http.get("/v1/schedules/nightly-digest", headers=bearer(ADMIN)).json()
    assert schedule["paused"] is True
    sign_in(driver, base, ADMIN)
    driver.get(f"{base}/console/audit?actor=key:ops")
    rows = until(lambda: [r.text for r in css(driver, "table.events tbody tr")], "entries")
    assert any("schedule.change" in row for row in rows)
    screenshot(driver, "audit")


def test_a_person_signs_in_through_the_identity_provider_with_their_groups_role(
    browser: Any, deployment: Deployment, http: httpx.Client
) -> None:
    from selenium.webdriver.common.by import By  # noqa: PLC0415
    from selenium.webdriver.support.ui import Select  # noqa: PLC0415

    base = deployment.base_url

    def through_provider(user: str) -> None:
        browser.delete_all_cookies()
        browser.get(f"{base}/console/sign-in")
        browser.find_element(By.ID, "oidc-sign-in").click()
        until(lambda: browser.find_elements(By.NAME, "username"), "the provider's form")
        Select(browser.find_element(By.NAME, "username")).select_by_visible_text(user)
        browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()

    through_provider("alice")
    until(lambda: css(browser, "form.who"), "alice signed in")
    assert "person:alice@example.test · approver · default" in css(browser, "form.who")[0].text
    browser.get(f"{base}/console/audit")  # an approver's session: not an admin's page
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not allowed"
    through_provider("nobody")  # in no group cairn maps: no session
    until(lambda: css(browser, "[role=alert]"), "the refusal")
    assert "Sign-in refused" in css(browser, "[role=alert]")[0].text
    assert not css(browser, "form.who")
    entries = http.get("/v1/audit", params={"action": "auth.oidc"}, headers=bearer(ADMIN)).json()[
        "entries"
    ]
    outcomes = {(e["actor"], e["outcome"]) for e in entries}
    assert ("person:alice@example.test", "ok") in outcomes
    assert ("person:nobody@example.test", "refused") in outcomes


def test_a_login_comes_back_once_and_only_to_the_browser_that_began_it(
    deployment: Deployment,
) -> None:
    base = deployment.base_url
    with httpx.Client(base_url=base, timeout=20) as person:
        began = person.get("/console/oidc/login", params={"login_hint": "alice"})
        assert began.status_code == 303 and "cairn_oidc_login" in began.cookies
        at_provider = httpx.get(began.headers["location"], timeout=20)
        assert at_provider.status_code in (302, 303), at_provider.text
        callback = at_provider.headers["location"]
        with httpx.Client(timeout=20) as stranger:  # the same URL, without the cookie
            assert stranger.get(callback).status_code == 403
        signed_in = person.get(callback)  # the stranger's try spent nothing
        assert signed_in.status_code == 303, signed_in.text
        home = person.get("/console/", follow_redirects=True)
        assert home.status_code == 200 and "person:alice@example.test" in home.text
        assert person.get(callback).status_code == 403  # the login is taken: once only


def test_an_operator_settles_a_held_node_from_the_inbox(
    browser: Any,
    deployment: Deployment,
    http: httpx.Client,
    keys: dict[str, str],
    tmp_path: Path,
) -> None:
    driver, base = browser, deployment.base_url
    release = tmp_path / "release"  # the held call ends once the test has seen it held
    run_id = start(http, "console_held", call_s=30, release=str(release))
    try:
        held = until(
            lambda: [w for w in run_of(http, run_id)["waiting"] if w.get("held")],
            "the node held for an operator",
        )[0]
        assert held["node"] == "charge"
        sign_in(driver, base, keys["ops"])
        driver.get(f"{base}/console/inbox")
        (card,) = [c for c in css(driver, "article.wait") if run_id[:8] in c.text]
        assert "Held: irreversible: timed out" in card.text
        screenshot(driver, "inbox-held")
        css(card, "a.button")[0].click()
        until(lambda: css(driver, "form.decide"), "the settlement form")
        assert css(driver, "#payload-charge") == []  # a held node takes no answer
        css(driver, "#comment-charge")[0].send_keys("The provider shows the charge: done.")
        css(driver, "button[value='recovery.complete']")[0].click()
        until(lambda: css(driver, "#run-status.s-succeeded"), "the run going on to its end")
        decision = until(
            lambda: [d.text for d in css(driver, "#decisions .decision") if "key:ops" in d.text],
            "the settlement under the operator's name",
        )[0]
        assert "recovery.complete" in decision and "The provider shows the charge" in decision
    finally:
        release.touch()
    (signal,) = signals(http, run_id)
    assert signal["data"]["actor"] == "key:ops" and signal["data"]["name"] == "recovery.complete"


def test_the_fleet_page_shows_the_worker_and_a_stalled_node(
    browser: Any,
    deployment: Deployment,
    http: httpx.Client,
    keys: dict[str, str],
    tmp_path: Path,
) -> None:
    driver, base = browser, deployment.base_url
    release = tmp_path / "release"
    run_id = start(http, "stalling", call_s=30, release=str(release))
    try:
        sign_in(driver, base, keys["vic"])  # a viewer reads the fleet

        def stalled_row() -> list[Any]:
            driver.get(f"{base}/console/fleet")
            return css(driver, f'#stalled tr[data-run="{run_id}"]')

        row = until(stalled_row, "the node flagged stalled on the fleet page", timeout_s=30)[0]
        assert "work#1" in row.text and "stalled" in row.text
        worker = row.find_elements("css selector", "td.mono")[0].text
        (alive,) = css(driver, f'#workers tr[data-worker="{worker}"]')
        assert "alive" in alive.text
        assert css(driver, "#queues tr[data-queue]")  # each queue with its depth
        screenshot(driver, "fleet-activity")
    finally:
        release.touch()
    until(lambda: run_of(http, run_id)["status"] == "succeeded", "the released node's end")


def test_an_operator_forks_a_run_after_the_dry_run_shows_the_divergence(
    browser: Any, deployment: Deployment, http: httpx.Client, keys: dict[str, str]
) -> None:
    driver, base = browser, deployment.base_url
    run_id = start(http, "anomaly_agent", question="what is cairn?")
    until(lambda: run_of(http, run_id)["status"] == "failed", "the stuck agent failed")
    sign_in(driver, base, keys["ops"])
    driver.get(f"{base}/console/runs/{run_id}")
    anomaly = until(lambda: css(driver, "#anomalies article.anomaly"), "the anomaly")[-1]
    assert "no_progress" in anomaly.text and "The scene, as it was caught" in anomaly.text
    seq = css(driver, "#at-seq")[0]
    seq.clear()
    seq.send_keys("1")
    css(driver, "#patch")[0].send_keys('{"progress": true, "answer_after": 2}')
    css(driver, "#try-fork")[0].click()
    until(lambda: css(driver, "#dry-run-report"), "the dry run's report")
    assert css(driver, "#dry-status")[0].text == "succeeded"
    assert "parts from the run's path at step 4" in css(driver, "#divergence")[0].text
    assert len(css(driver, "tr.first-parted")) == 1
    screenshot(driver, "fork-dry-run")
    css(driver, "#confirm-fork")[0].click()
    until(lambda: css(driver, "#run-status.s-succeeded"), "the live fork's end, on its page")
    fork_id = driver.current_url.rsplit("/", 1)[1]
    fork = run_of(http, fork_id)
    assert fork["parent_run_id"] == run_id and fork["fork_seq"] == 1
    forks = http.get(f"/v1/runs/{run_id}/forks", headers=bearer(ADMIN)).json()["forks"]
    assert [f["run_id"] for f in forks] == [fork_id]
    driver.get(f"{base}/console/runs/{run_id}")
    assert css(driver, f'#forks a[href="/console/runs/{fork_id}"]')
