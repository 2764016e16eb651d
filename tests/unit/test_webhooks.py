"""Webhooks without services: signing, URL checks, what a step announces, and delivery
(retries, give-up, 410, lapsed holds) on the embedded store with a mocked receiver."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn.config import Settings
from cairn.engine.notices import MAX_RESULT_BYTES, check_url, notices
from cairn.errors import ConfigError, InvalidInput
from cairn.model.commands import HoldExecution
from cairn.model.events import Phase
from cairn.model.state import NodeState, RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.runtime import Runtime
from cairn.scheduler.notifier import Notifier, backoff_s
from cairn.testing.clock import FakeClock
from cairn.webhooks import WebhookSecrets, WebhookSignatureError, sign, verify
from tests.unit.test_embedded import settings as embedded_settings
from tests.unit.test_embedded import wait

SECRET = "whsec-0123456789abcdef"
BODY = b'{"id":"r.3","type":"run.succeeded"}'


# -- signing ----------------------------------------------------------------------------


def test_a_signature_verifies_with_its_secret_only() -> None:
    header = sign(BODY, [SECRET], timestamp=1_700_000_000)
    assert verify(BODY, header, SECRET, now=1_700_000_010) == 1_700_000_000
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify(BODY, header, "another-secret-0123", now=1_700_000_010)
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify(BODY.replace(b"succeeded", b"failed"), header, SECRET, now=1_700_000_010)


def test_an_old_signature_is_a_replay() -> None:
    header = sign(BODY, [SECRET], timestamp=1_700_000_000)
    with pytest.raises(WebhookSignatureError, match="replay"):
        verify(BODY, header, SECRET, now=1_700_000_000 + 301)
    # Moving the timestamp breaks the MAC: it is signed with the body.
    forged = header.replace("t=1700000000", "t=1700000300")
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify(BODY, forged, SECRET, now=1_700_000_300)


@pytest.mark.parametrize("header", [None, "", "t=abc,v1=00", "v1=00", "t=1700000000"])
def test_a_malformed_header_is_refused(header: str | None) -> None:
    with pytest.raises(WebhookSignatureError):
        verify(BODY, header, SECRET, now=1_700_000_000)


def test_every_secret_of_a_namespace_signs_for_rotation() -> None:
    old, new = "whsec-old-0123456789ab", "whsec-new-0123456789ab"
    header = sign(BODY, [old, new])
    assert header.count("v1=") == 2
    verify(BODY, header, old)
    verify(BODY, header, [new])


def test_secrets_come_by_namespace_from_the_variable_and_a_file(tmp_path: Path) -> None:
    file = tmp_path / "secrets"
    file.write_text(f"# rotation\nalpha:whsec-next-0123456789\nbeta:{SECRET}\n")
    secrets = WebhookSecrets.from_settings(
        Settings(webhook_secrets=f"alpha:{SECRET}", webhook_secrets_file=file)  # type: ignore[arg-type]
    )
    assert secrets.of("alpha") == (SECRET, "whsec-next-0123456789")
    assert secrets.of("beta") == (SECRET,)
    assert secrets.of("gamma") == ()
    with pytest.raises(ConfigError, match="shorter than 16") as refused:
        WebhookSecrets.from_settings(Settings(webhook_secrets="alpha:short"))  # type: ignore[arg-type]
    assert "short" not in str(refused.value).replace("shorter", "")


# -- URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "required"),
        ("ftp://example.com/x", "http"),
        ("file:///etc/passwd", "http"),
        ("https://", "http"),
        ("https://user:pw@example.com/", "credentials"),
        ("https://example.com:99999/", "not a valid URL"),
        ("https://" + "a" * 2000 + ".com", "longer than"),
        ("https://evil.test/hook", "not one webhooks may call"),
    ],
)
def test_bad_webhook_urls_are_refused(url: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        check_url(url, ["*.example.com", "127.0.0.1"])


def test_allowed_hosts_match_by_pattern() -> None:
    assert check_url(" https://hooks.example.com/a?b=1 ", ["*.example.com"]) == (
        "https://hooks.example.com/a?b=1"
    )
    assert check_url("http://anything.test/", []) == "http://anything.test/"


# -- what a step announces ----------------------------------------------------------------


def _state(status: RunStatus, **nodes: NodeStatus) -> RunState:
    state = RunState("r", "approval", 1, status=status, updated_at=100.0)
    state.nodes = {name: NodeState(name, 1, node_status) for name, node_status in nodes.items()}
    return state


def test_a_run_ending_is_announced_once_with_its_result() -> None:
    before = _state(RunStatus.RUNNING)
    after = _state(RunStatus.SUCCEEDED)
    after.vars = {"total": 3}
    (notice,) = notices(before, after, [], 7, "alpha")
    assert notice.event_id == "r.7"
    assert notice.kind == "run.succeeded"
    assert notice.body["run"]["result"] == {"total": 3}
    assert notice.body["run"]["namespace"] == "alpha"
    assert notices(after, after, [], 8, "alpha") == []  # an ended run ends once


def test_a_large_result_is_left_out_of_the_body() -> None:
    after = _state(RunStatus.SUCCEEDED)
    after.vars = {"draft": "x" * MAX_RESULT_BYTES}
    (notice,) = notices(_state(RunStatus.RUNNING), after, [], 3, "alpha")
    assert "result" not in notice.body["run"]
    assert "GET /v1/runs/r" in notice.body["run"]["result_omitted"]


def test_milestones_waiting_and_held() -> None:
    waiting = _state(RunStatus.WAITING, review=NodeStatus.WAITING)
    (notice,) = notices(_state(RunStatus.RUNNING), waiting, [], 2, "default")
    assert (notice.kind, notice.body["run"]["waiting_for"]) == ("run.waiting", ["review"])
    assert notices(waiting, waiting, [], 3, "default") == []  # still waiting: no news

    held = _state(RunStatus.RUNNING, pay=NodeStatus.HELD)
    hold = HoldExecution("pay", 1, 1, Phase.RUN)
    (notice,) = notices(_state(RunStatus.RUNNING), held, [hold], 4, "default")
    assert (notice.kind, notice.event_id, notice.body["run"]["held"]) == (
        "run.held",
        "r.4.held",
        ["pay"],
    )
    assert json.dumps(notice.body)  # the body is JSON


def test_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    settings = Settings(webhook_retry_base_s=2.0, webhook_retry_max_s=60.0)
    for attempts, full in [(1, 2.0), (2, 4.0), (3, 8.0), (6, 60.0), (40, 60.0)]:
        delay = backoff_s(attempts, settings)
        assert full / 2 <= delay <= full


# -- delivery -----------------------------------------------------------------------------


class Receiver:
    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else 200
        return httpx.Response(status, text="nope" if status >= 300 else "")


def _runtime(tmp_path: Path, **overrides: Any) -> Runtime:
    return Runtime.build(
        embedded_settings(
            tmp_path,
            **{"webhook_secrets": f"default:{SECRET}", "webhook_retry_base_s": 0.01, **overrides},
        )
    )


def _notifier(runtime: Runtime, receiver: Receiver) -> Notifier:
    client = httpx.Client(transport=httpx.MockTransport(receiver))
    return Notifier(runtime.store, runtime.settings, client=client)


def _deliver_all(notifier: Notifier, until: Any, clock: FakeClock, timeout_s: float = 10.0) -> None:
    """Notifier passes until ``until()``, the database's clock (SQLite: this process's
    wall clock) moved 10 ms after each: retries come due without waiting for them."""
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline
        notifier.run_once()
        clock.advance(0.01)


def _rows(runtime: Runtime, run_id: str) -> list[Any]:
    with runtime.store.reading() as tx:
        return tx.notifications_of(run_id)


def test_a_run_is_announced_through_the_outbox_and_retried_until_taken(
    tmp_path: Path, wall_clock: FakeClock
) -> None:
    runtime = _runtime(tmp_path)
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "ledger")}, webhook="https://hooks.test/x"
        )
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        (row,) = _rows(runtime, run_id)  # written with the last step, not delivered yet
        assert (row.kind, row.attempts, row.delivered_at) == ("run.succeeded", 0, None)
        receiver = Receiver(500, 503)
        notifier = _notifier(runtime, receiver)
        _deliver_all(
            notifier, lambda: _rows(runtime, run_id)[0].delivered_at is not None, wall_clock
        )
        (row,) = _rows(runtime, run_id)
        assert (row.attempts, row.last_status) == (3, 200)
        assert [r.headers["Cairn-Delivery-Attempt"] for r in receiver.requests] == ["1", "2", "3"]
        for request in receiver.requests:
            assert request.headers["Cairn-Event-Id"] == row.event_id
            verify(request.content, request.headers["Cairn-Signature"], SECRET)
        assert notifier.run_once() == 0  # delivered: never again
    finally:
        runtime.close()


def test_a_gone_receiver_and_the_last_attempt_give_up(
    tmp_path: Path, wall_clock: FakeClock
) -> None:
    runtime = _runtime(tmp_path, webhook_max_attempts=2)
    runtime.start_workers()
    try:
        gone = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "l1")}, webhook="https://hooks.test/gone"
        )
        failing = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "l2")}, webhook="https://hooks.test/down"
        )
        for run_id in (gone, failing):
            assert wait(runtime, run_id) is RunStatus.SUCCEEDED

        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(410 if request.url.path == "/gone" else 500)

        notifier = Notifier(
            runtime.store,
            runtime.settings,
            client=httpx.Client(transport=httpx.MockTransport(answer)),
        )
        _deliver_all(
            notifier,
            lambda: all(_rows(runtime, r)[0].given_up_at is not None for r in (gone, failing)),
            wall_clock,
        )
        assert (_rows(runtime, gone)[0].attempts, _rows(runtime, gone)[0].last_status) == (1, 410)
        assert _rows(runtime, failing)[0].attempts == 2
    finally:
        runtime.close()


def test_nothing_is_sent_unsigned_and_a_lapsed_hold_records_nothing(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "ledger")}, webhook="https://hooks.test/x"
        )
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        receiver = Receiver()
        unsigned = Notifier(
            runtime.store,
            runtime.settings,
            secrets=WebhookSecrets({}),
            client=httpx.Client(transport=httpx.MockTransport(receiver)),
        )
        assert unsigned.run_once() == 1
        (row,) = _rows(runtime, run_id)
        assert receiver.requests == []
        assert row.delivered_at is None and "no webhook secret" in row.last_error
        with runtime.store.transaction() as tx:  # another notifier took it over since
            assert not tx.settle_notification(row.id, row.attempts - 1, status=200, error=None)
    finally:
        runtime.close()


def test_a_namespace_without_a_secret_cannot_name_a_webhook(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    try:
        with pytest.raises(InvalidInput, match="no signing secret"):
            runtime.orchestrator.submit("chain10", {}, namespace="other", webhook="https://a.b/")
    finally:
        runtime.close()
