"""Webhooks without services: signing, URL checks, what a step announces, the backoff,
and a namespace without a secret refused. Delivery (retries, give-up, 410, lapsed holds)
of runs the embedded runtime's workers finished: tests/embedded/test_webhooks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cairn.config import Settings
from cairn.engine.notices import MAX_RESULT_BYTES, check_url, notices
from cairn.errors import ConfigError, InvalidInput
from cairn.model.commands import HoldExecution
from cairn.model.events import Phase
from cairn.model.state import NodeState, RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.runtime import Runtime
from cairn.scheduler.notifier import backoff_s
from cairn.webhooks import WebhookSecrets, WebhookSignatureError, sign, verify
from tests.support.embedded import settings as embedded_settings

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


def _runtime(tmp_path: Path, **overrides: Any) -> Runtime:
    return Runtime.build(
        embedded_settings(
            tmp_path,
            **{"webhook_secrets": f"default:{SECRET}", "webhook_retry_base_s": 0.01, **overrides},
        )
    )


def test_a_namespace_without_a_secret_cannot_name_a_webhook(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    try:
        with pytest.raises(InvalidInput, match="no signing secret"):
            runtime.orchestrator.submit("chain10", {}, namespace="other", webhook="https://a.b/")
    finally:
        runtime.close()
