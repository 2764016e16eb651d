"""Approvals bound to people, against a real ``cairn api`` on PostgreSQL with a worker and
the scheduler: a wait's approvers (anyone else 403, nothing written), a quorum of two
distinct principals (each vote recorded), an edited answer held to its schema (422
outside it), a signal sent before its wait opens kept and applied when it does (and
refused for a wait with approvers), and the context a wait shows whoever decides it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.api_server import Deployment, api_deployment, bearer, mint_keys_over_http

ADMIN = "approvals-admin-key-0123456789"


@pytest.fixture(scope="module")
def deployment(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("approvals")
    keys = {"CAIRN_API_KEYS": f"shop:{ADMIN}"}
    with api_deployment(pg_template, tmp, api_env=keys, namespaces=("shop",)) as live:
        yield live


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.base_url, timeout=20) as client:
        yield client


@pytest.fixture(scope="module")
def keys(http: httpx.Client) -> dict[str, str]:
    """Approvers ann, bea, alice, bob; viewer vic; operator ops."""
    roles = dict.fromkeys(("ann", "bea", "alice", "bob"), "approver")
    roles |= {"vic": "viewer", "ops": "operator"}
    return mint_keys_over_http(http, {n: (role, False) for n, role in roles.items()}, ADMIN)


def start(http: httpx.Client, keys: dict[str, str], workflow: str, **inputs: Any) -> str:
    started = http.post(
        "/v1/runs", json={"workflow": workflow, "input": inputs}, headers=bearer(keys["ops"])
    )
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def run_of(http: httpx.Client, run_id: str, key: str = ADMIN) -> dict[str, Any]:
    return dict(http.get(f"/v1/runs/{run_id}", headers=bearer(key)).json())


def until(http: httpx.Client, run_id: str, check: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = run_of(http, run_id)
        if check(run):
            return run
        assert time.monotonic() < deadline, f"{what}: {run}"
        time.sleep(0.05)


def waiting_at(node: str) -> Any:
    return lambda run: any(w["node"] == node for w in run["waiting"])


def running(node: str) -> Any:
    return lambda run: any(current.startswith(f"{node}#") for current in run["current"])


def events(http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return list(http.get(f"/v1/runs/{run_id}/events", headers=bearer(ADMIN)).json()["events"])


def approve(http: httpx.Client, run_id: str, key: str, **body: Any) -> httpx.Response:
    return http.post(f"/v1/runs/{run_id}/signals/approve", json=body, headers=bearer(key))


def test_a_quorum_of_two_distinct_approvers_with_an_answer_held_to_its_schema(
    http: httpx.Client, keys: dict[str, str]
) -> None:
    run_id = start(http, keys, "reviewed")
    run = until(http, run_id, waiting_at("review"), "the review")
    (review,) = run["waiting"]
    assert (review["approvers"], review["quorum"]) == (["role:approver"], 2)
    assert review["context"]["fields"] == {"last": "draft"}
    assert review["context"]["messages"] == [{"role": "tool", "content": "draft done"}]
    # A viewer sees that it waits, not what the wait shows whoever decides it.
    assert run_of(http, run_id, keys["vic"])["waiting"][0]["context"] is None
    assert run_of(http, run_id, keys["ann"])["waiting"][0]["context"] == review["context"]

    edited = approve(http, run_id, keys["ann"], payload={"answer": "x" * 41})
    assert edited.status_code == 422, edited.text
    assert "response schema" in edited.json()["error"]["message"]
    assert approve(http, run_id, keys["ann"], payload={"answer": "ship"}).status_code == 200
    assert approve(http, run_id, keys["ann"], payload={"answer": "ship"}).status_code == 200
    run = run_of(http, run_id)
    assert run["status"] == "waiting"  # one principal, twice: one vote
    assert run["waiting"][0]["votes"] == {"approve": ["key:ann"]}
    assert approve(http, run_id, keys["bea"], payload={"answer": "ship it"}).status_code == 200
    done = until(http, run_id, lambda r: r["status"] == "succeeded", "the run")
    decision = done["vars"]["decisions"]["review"]
    assert decision["votes"] == ["key:ann", "key:bea"]
    assert (decision["actor"], decision["payload"]) == ("key:bea", {"answer": "ship it"})
    signals = [e for e in events(http, run_id) if e["type"] == "signal_received"]
    assert [(e["data"]["actor"], e["data"]["role"]) for e in signals] == [
        ("key:ann", "approver"),
        ("key:ann", "approver"),
        ("key:bea", "approver"),
    ]  # each vote in the history, the refused one not


def test_only_the_named_approver_decides_and_an_early_signal_waits_for_its_wait(
    http: httpx.Client, keys: dict[str, str]
) -> None:
    run_id = start(http, keys, "signed_off", slow={"notify": 2})
    until(http, run_id, waiting_at("sign"), "the sign-off")
    early = http.post(
        f"/v1/runs/{run_id}/signals/approve", json={"node": "sign"}, headers=bearer(keys["ann"])
    )
    before = events(http, run_id)
    refused = approve(http, run_id, keys["bob"], comment="looks fine to me")
    assert refused.status_code == 403, refused.text
    assert "approvers are alice" in refused.json()["error"]["message"]
    assert early.status_code == 403  # ann is not alice either
    assert events(http, run_id) == before  # nothing written
    audit = http.get("/v1/audit?outcome=refused", headers=bearer(ADMIN)).json()["entries"]
    assert any(e["actor"] == "key:bob" and e["action"] == "run.signal" for e in audit)
    assert approve(http, run_id, keys["alice"]).status_code == 200
    # notify runs for two seconds: a signal for the wait after it, sent now, is kept.
    until(http, run_id, running("notify"), "notify")
    kept = http.post(
        f"/v1/runs/{run_id}/signals/seen", json={"node": "ack"}, headers=bearer(keys["ann"])
    )
    assert kept.status_code == 200, kept.text
    assert run_of(http, run_id)["status"] == "running"  # kept: notify still runs
    done = until(http, run_id, lambda r: r["status"] != "running", "the end")
    assert done["status"] == "succeeded", done
    assert done["vars"]["decisions"]["ack"]["actor"] == "key:ann"
    # A wait with approvers keeps no early signal: one for it before it opens is refused.
    second = start(http, keys, "signed_off", slow={"draft": 2})
    until(http, second, running("draft"), "the draft")
    too_soon = http.post(
        f"/v1/runs/{second}/signals/approve", json={"node": "sign"}, headers=bearer(keys["alice"])
    )
    assert too_soon.status_code == 409, too_soon.text
