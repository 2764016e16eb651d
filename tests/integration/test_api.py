"""The HTTP API against a real uvicorn server (``cairn api`` as a subprocess) backed by
PostgreSQL, Redis, a Celery worker and the scheduler, so that runs really execute.

One deployment serves the whole module (starting a worker per test would cost more than
the tests): every test works on runs of its own, in one of two namespaces.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from cairn.access.authenticate import config_key_name
from cairn.webhooks import WebhookSignatureError, verify
from tests.support.api_server import Deployment, api_deployment

KEY_A = "alpha-key-0123456789abcdef"
KEY_B = "beta-key-0123456789abcdef0"
A = {"Authorization": f"Bearer {KEY_A}"}
ALPHA = f"key:{config_key_name(KEY_A)}"  # the actor of what A's requests write
B = {"Authorization": f"Bearer {KEY_B}"}
MAX_BODY = 65_536
WEBHOOK_SECRET = "whsec-alpha-0123456789abcdef"


@pytest.fixture(scope="module")
def deployment(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Database, Redis, worker, scheduler and the API server for this module."""
    tmp = tmp_path_factory.mktemp("api")
    keys_file = tmp / "keys"
    keys_file.write_text(f"# the second namespace's key comes from a file\nbeta:{KEY_B}\n")
    with api_deployment(
        pg_template,
        tmp,
        # Only alpha may name webhooks, and only on loopback (schemathesis's random URLs
        # are refused, never called). The receiver listens on loopback, which webhooks may
        # not call unless allowed: allowed here, 127.0.0.1 alone.
        env={
            "CAIRN_WEBHOOK_SECRETS": f"alpha:{WEBHOOK_SECRET}",
            "CAIRN_WEBHOOK_HOSTS": "127.0.0.1",
            "CAIRN_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1",
            "CAIRN_WEBHOOK_RETRY_BASE_S": "0.2",
        },
        api_env={
            "CAIRN_API_KEYS": f"alpha:{KEY_A}",
            "CAIRN_API_KEYS_FILE": str(keys_file),
            "CAIRN_API_MAX_BODY_BYTES": str(MAX_BODY),
        },
        namespaces=("alpha", "beta"),
    ) as deployed:
        yield deployed


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.base_url, timeout=10) as client:
        yield client


def submit(http: httpx.Client, ledger: Path, workflow: str = "approval", **extra: Any) -> str:
    headers = extra.pop("headers", A)
    webhook = {"webhook": extra.pop("webhook")} if "webhook" in extra else {}
    response = http.post(
        "/v1/runs",
        json={"workflow": workflow, "input": {"ledger": str(ledger), **extra}, **webhook},
        headers=headers,
    )
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


def wait_status(
    http: httpx.Client,
    run_id: str,
    *statuses: str,
    headers: dict[str, str] = A,
    timeout_s: float = 60,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = http.get(f"/v1/runs/{run_id}", headers=headers).json()
        if run["status"] in statuses:
            return dict(run)
        terminal = {"succeeded", "failed", "cancelled", "compensated", "rolled_back"}
        assert run["status"] not in terminal, f"run {run_id} ended {run['status']}: {run['reason']}"
        assert time.monotonic() < deadline, f"run {run_id} still {run['status']}"
        time.sleep(0.05)


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


# -- operations and auth ----------------------------------------------------------------


def test_probes_and_metrics_need_no_key(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200
    spec = http.get("/openapi.json").json()
    assert "/v1/runs" in spec["paths"]
    assert "/v1/runs/{run_id}/stream" in spec["paths"]
    metrics = http.get("/metrics")
    assert metrics.status_code == 200
    assert "cairn_api_requests_total" in metrics.text


def test_every_v1_endpoint_refuses_without_a_valid_key(http: httpx.Client) -> None:
    run = "00000000-0000-0000-0000-000000000000"
    calls = [
        ("POST", "/v1/runs", {"workflow": "approval"}),
        ("POST", "/v1/runs:batch", {"runs": [{"workflow": "approval"}]}),
        ("GET", "/v1/runs", None),
        ("GET", "/v1/runs/counts", None),
        ("GET", f"/v1/runs/{run}", None),
        ("GET", f"/v1/runs/{run}/events", None),
        ("GET", f"/v1/runs/{run}/stream", None),
        ("POST", f"/v1/runs/{run}/signals/approve", {}),
        ("POST", f"/v1/runs/{run}/cancel", {}),
        ("POST", f"/v1/runs/{run}/fork", {"at_seq": 1, "confirm": True}),
        ("GET", f"/v1/runs/{run}/artifacts", None),
        ("GET", "/v1/workflows", None),
        ("POST", "/v1/schedules", {"name": "s", "workflow": "approval", "cron": "0 9 * * *"}),
        ("GET", "/v1/schedules", None),
        ("GET", "/v1/schedules/s", None),
        ("PATCH", "/v1/schedules/s", {"cron": "0 10 * * *"}),
        ("POST", "/v1/schedules/s/pause", None),
        ("POST", "/v1/schedules/s/resume", None),
        ("POST", "/v1/schedules/s/backfill", {"start": 0, "end": 3600}),
        ("DELETE", "/v1/schedules/s", None),
    ]
    wrong = [
        {},
        {"Authorization": "Bearer not-a-key-at-all-0000"},
        {"Authorization": f"Basic {KEY_A}"},
        {"Authorization": f"Bearer {KEY_A}x"},
    ]
    for method, path, body in calls:
        for headers in wrong:
            response = http.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert error_code(response) == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"


def test_workflows(http: httpx.Client) -> None:
    found = http.get("/v1/workflows", headers=A).json()["workflows"]
    assert {"approval", "chain10", "artifacts"} <= {w["name"] for w in found}


# -- submit, read, list -----------------------------------------------------------------


def test_submit_signal_and_read(http: httpx.Client, deployment: Deployment) -> None:
    response = http.post(
        "/v1/runs",
        json={"workflow": "approval", "input": {"ledger": str(deployment.ledger)}},
        headers=A,
    )
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    assert response.json()["status_url"] == f"/v1/runs/{run_id}"
    assert response.headers["location"] == f"/v1/runs/{run_id}"

    run = wait_status(http, run_id, "waiting")
    assert run["namespace"] == "alpha"
    assert run["nodes"] == {"draft": "succeeded", "review": "waiting"}
    assert run["progress"] == {"steps": 2, "done": 1, "total": 2}
    assert run["waiting"][0]["signals"] == ["approve", "reject"]
    assert any("waiting for a signal (approve, reject)" in line for line in run["explain"])
    assert run["last_event"]["seq"] == run["last_seq"] == 2
    assert run["result"] is None

    refused = http.post(f"/v1/runs/{run_id}/signals/maybe", json={}, headers=A)
    assert refused.status_code == 409
    assert error_code(refused) == "unknown_signal"

    body = {"payload": {"note": "ship it"}, "comment": "as agreed", "signal_id": "sig-1"}
    applied = http.post(f"/v1/runs/{run_id}/signals/approve", json=body, headers=A)
    assert applied.status_code == 200, applied.text
    assert applied.json()["applied"] is True
    again = http.post(f"/v1/runs/{run_id}/signals/approve", json=body, headers=A)
    assert again.status_code == 200
    assert again.json()["applied"] is False  # the same signal id is applied once

    run = wait_status(http, run_id, "succeeded")
    assert run["result"]["decisions"]["review"]["actor"] == ALPHA
    assert run["progress"]["done"] == 2

    late = http.post(f"/v1/runs/{run_id}/signals/approve", json={}, headers=A)
    assert late.status_code == 409
    assert error_code(late) == "not_waiting"

    events = http.get(f"/v1/runs/{run_id}/events", headers=A).json()
    assert [e["seq"] for e in events["events"]] == list(range(1, run["last_seq"] + 1))
    assert events["next_after"] == run["last_seq"]
    page = http.get(f"/v1/runs/{run_id}/events?after=1&limit=2", headers=A).json()
    assert [e["seq"] for e in page["events"]] == [2, 3]
    assert page["events"][1]["type"] == "signal_received"


def test_list_runs_pages_by_keyset(http: httpx.Client, deployment: Deployment) -> None:
    mine = {submit(http, deployment.ledger, "chain10") for _ in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        query = "/v1/runs?workflow=chain10&limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = http.get(query, headers=A).json()
        seen.extend(run["id"] for run in page["runs"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert mine <= set(seen)
    assert len(seen) == len(set(seen))  # no run twice across pages
    created = [
        run["created_at"] for run in http.get("/v1/runs?limit=500", headers=A).json()["runs"]
    ]
    assert created == sorted(created, reverse=True)

    for run_id in mine:
        wait_status(http, run_id, "succeeded")
    done = http.get("/v1/runs?status=succeeded&workflow=chain10&limit=500", headers=A).json()
    assert mine <= {run["id"] for run in done["runs"]}
    assert http.get("/v1/runs?status=running&workflow=chain10", headers=A).json()["runs"] == []
    bad = http.get("/v1/runs?cursor=bm90LWEtY3Vyc29y", headers=A)
    assert bad.status_code == 422
    assert "cursor" in bad.json()["error"]["message"]


def test_run_counts_by_status_are_capped_and_scoped(
    http: httpx.Client, deployment: Deployment
) -> None:
    mine = [submit(http, deployment.ledger, "chain10") for _ in range(3)]
    for run_id in mine:
        wait_status(http, run_id, "succeeded")
    listed = http.get("/v1/runs?workflow=chain10&limit=500", headers=A).json()["runs"]
    counts = http.get("/v1/runs/counts?workflow=chain10", headers=A).json()
    assert counts["cap"] == 10_000
    by_status = {status: c["count"] for status, c in counts["counts"].items() if c["count"]}
    assert by_status == {
        s: sum(r["status"] == s for r in listed) for s in {r["status"] for r in listed}
    }
    assert not any(c["more"] for c in counts["counts"].values())
    capped = http.get("/v1/runs/counts?workflow=chain10&status=succeeded&cap=2", headers=A)
    assert capped.json()["counts"] == {"succeeded": {"count": 2, "more": True}}
    theirs = http.get("/v1/runs/counts?workflow=chain10", headers=B).json()["counts"]
    assert all(c["count"] == 0 for c in theirs.values())  # another namespace's runs
    assert http.get("/v1/runs/counts?cap=0", headers=A).status_code == 422
    assert http.get("/v1/runs/counts").status_code == 401


def test_namespaces_are_isolated(http: httpx.Client, deployment: Deployment) -> None:
    run_id = submit(http, deployment.ledger)
    wait_status(http, run_id, "waiting")
    for method, path in [
        ("GET", f"/v1/runs/{run_id}"),
        ("GET", f"/v1/runs/{run_id}/events"),
        ("GET", f"/v1/runs/{run_id}/stream"),
        ("GET", f"/v1/runs/{run_id}/artifacts"),
        ("POST", f"/v1/runs/{run_id}/signals/approve"),
        ("POST", f"/v1/runs/{run_id}/cancel"),
    ]:
        response = http.request(method, path, headers=B, json={} if method == "POST" else None)
        assert response.status_code == 404, (path, response.text)  # never 403
        assert error_code(response) == "run_not_found"
    assert run_id not in {
        run["id"] for run in http.get("/v1/runs?limit=500", headers=B).json()["runs"]
    }
    # B's signal and cancel changed nothing.
    assert wait_status(http, run_id, "waiting")["last_seq"] == 2
    theirs = submit(http, deployment.ledger, headers=B)
    assert http.get(f"/v1/runs/{theirs}", headers=A).status_code == 404
    assert http.get(f"/v1/runs/{theirs}", headers=B).json()["namespace"] == "beta"


# -- idempotency and batches ------------------------------------------------------------


def test_idempotent_submit(http: httpx.Client, deployment: Deployment) -> None:
    key = {"Idempotency-Key": f"order-{uuid.uuid4()}"}
    body = {"workflow": "chain10", "input": {"ledger": str(deployment.ledger), "n": 1}}
    first = http.post("/v1/runs", json=body, headers={**A, **key})
    assert first.status_code == 202
    second = http.post("/v1/runs", json=body, headers={**A, **key})
    assert second.status_code == 200
    assert second.json()["run_id"] == first.json()["run_id"]

    changed = {**body, "input": {**body["input"], "n": 2}}
    conflict = http.post("/v1/runs", json=changed, headers={**A, **key})
    assert conflict.status_code == 409
    assert error_code(conflict) == "idempotency_conflict"
    other_workflow = http.post(
        "/v1/runs", json={**body, "workflow": "approval"}, headers={**A, **key}
    )
    assert other_workflow.status_code == 409
    # true and 1 are equal in Python, not to a handler: a different request.
    typed = {**body, "input": {**body["input"], "n": True}}
    assert http.post("/v1/runs", json=typed, headers={**A, **key}).status_code == 409

    # Keys belong to a namespace: the same key elsewhere is another request.
    elsewhere = http.post("/v1/runs", json=body, headers={**B, **key})
    assert elsewhere.status_code == 202
    assert elsewhere.json()["run_id"] != first.json()["run_id"]
    wait_status(http, first.json()["run_id"], "succeeded")
    assert http.post("/v1/runs", json=body, headers={**A, **key}).json() == first.json()


def test_batch(http: httpx.Client, deployment: Deployment) -> None:
    ledger = str(deployment.ledger)
    taken = f"batch-{uuid.uuid4()}"
    before = http.post(
        "/v1/runs:batch",
        json={"runs": [{"workflow": "chain10", "input": {"ledger": ledger}, "request_id": taken}]},
        headers=A,
    ).json()
    assert before["created"] == 1
    items = [{"workflow": "chain10", "input": {"ledger": ledger, "i": i}} for i in range(3)] + [
        {"workflow": "no_such_workflow"},
        {"workflow": "chain10", "input": {"ledger": ledger}, "request_id": taken},
        {"workflow": "chain10", "input": {"ledger": ledger, "other": 1}, "request_id": taken},
        {"workflow": "chain10", "input": {"ledger": 5}},  # does not match the input schema
    ]
    response = http.post("/v1/runs:batch", json={"runs": items}, headers=A)
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["created"], result["existing"], result["refused"]) == (3, 1, 3)
    answers = result["results"]
    assert [a["index"] for a in answers] == list(range(len(items)))
    assert all(a["created"] for a in answers[:3])
    assert answers[3]["error"]["code"] == "unknown_workflow"
    assert answers[4]["run_id"] == before["results"][0]["run_id"]
    assert answers[4]["created"] is False
    assert answers[5]["error"]["code"] == "idempotency_conflict"
    assert answers[6]["error"]["code"] == "invalid_input"
    for answer in answers[:3]:
        assert wait_status(http, answer["run_id"], "succeeded")["namespace"] == "alpha"

    # A request id twice in one batch: the same request is the same run, another a conflict.
    twice = {"workflow": "chain10", "input": {"ledger": ledger}, "request_id": f"twice-{taken}"}
    response = http.post(
        "/v1/runs:batch",
        json={"runs": [twice, twice, {**twice, "input": {"ledger": ledger, "other": 1}}]},
        headers=A,
    )
    assert response.status_code == 200, response.text
    first, again, other = response.json()["results"]
    assert first["created"] is True and again["created"] is False
    assert again["run_id"] == first["run_id"]
    assert other["error"]["code"] == "idempotency_conflict"
    wait_status(http, first["run_id"], "succeeded")

    too_many = http.post("/v1/runs:batch", json={"runs": [{"workflow": "x"}] * 1001}, headers=A)
    assert too_many.status_code == 422
    assert too_many.json()["error"]["fields"][0]["field"] == "body.runs"


# -- refusals ---------------------------------------------------------------------------


def test_bodies_over_the_limit_are_refused_with_413(http: httpx.Client) -> None:
    big = json.dumps({"workflow": "approval", "input": {"blob": "x" * MAX_BODY}}).encode()
    declared = http.post("/v1/runs", content=big, headers={**A, "Content-Type": "application/json"})
    assert declared.status_code == 413
    assert error_code(declared) == "payload_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    streamed = http.post(
        "/v1/runs", content=chunks(), headers={**A, "Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert error_code(streamed) == "payload_too_large"


def test_unknown_fields_and_wrong_types_are_named(http: httpx.Client) -> None:
    cases = [
        ({"workflow": "approval", "imput": {}}, "body.imput"),
        ({"workflow": "approval", "input": "not an object"}, "body.input"),
        ({"workflow": "approval", "version": "one"}, "body.version"),
        ({"input": {}}, "body.workflow"),
        ({"workflow": "approval", "input": {"nul": "a\u0000b"}}, None),  # storable JSON only
    ]
    for body, field in cases:
        response = http.post("/v1/runs", json=body, headers=A)
        assert response.status_code == 422, (body, response.text)
        error = response.json()["error"]
        if field is not None:
            assert error["code"] == "validation_error"
            assert [f["field"] for f in error["fields"]] == [field]
            assert field in error["message"]
        else:
            assert error["code"] == "invalid_input"
    plain = http.post(
        "/v1/runs", content=b"workflow=approval", headers={**A, "Content-Type": "text/plain"}
    )
    assert plain.status_code == 415
    not_json = http.post(
        "/v1/runs", content=b"{oops", headers={**A, "Content-Type": "application/json"}
    )
    assert not_json.status_code == 400 and error_code(not_json) == "bad_request"
    unknown = http.post("/v1/runs", json={"workflow": "nope"}, headers=A)
    assert unknown.status_code == 404
    assert error_code(unknown) == "unknown_workflow"
    assert error_code(http.get("/v1/nothing-here", headers=A)) == "not_found"


def test_a_runs_priority_is_taken_shown_and_checked(
    http: httpx.Client, deployment: Deployment
) -> None:
    body = {"workflow": "approval", "input": {"ledger": str(deployment.ledger)}}
    urgent = http.post("/v1/runs", json={**body, "priority": 4}, headers=A)
    assert urgent.status_code == 202, urgent.text
    run = http.get(f"/v1/runs/{urgent.json()['run_id']}", headers=A).json()
    assert run["priority"] == 4
    plain = http.post("/v1/runs", json=body, headers=A).json()["run_id"]
    assert http.get(f"/v1/runs/{plain}", headers=A).json()["priority"] == 0
    batch = http.post(
        "/v1/runs:batch", json={"runs": [{**body, "priority": -5}, body]}, headers=A
    ).json()["results"]
    assert [http.get(f"/v1/runs/{r['run_id']}", headers=A).json()["priority"] for r in batch] == [
        -5,
        0,
    ]
    before = len(http.get("/v1/runs?limit=200", headers=A).json()["runs"])
    for bad in (6, -6, 1.5, "1", True):
        refused = http.post("/v1/runs", json={**body, "priority": bad}, headers=A)
        assert refused.status_code == 422, (bad, refused.text)
        error = refused.json()["error"]
        assert [f["field"] for f in error["fields"]] == ["body.priority"], (bad, error)
        refused = http.post("/v1/runs:batch", json={"runs": [{**body, "priority": bad}]}, headers=A)
        assert refused.status_code == 422, (bad, refused.text)
    assert len(http.get("/v1/runs?limit=200", headers=A).json()["runs"]) == before


# -- cancel, artifacts ------------------------------------------------------------------


def test_cancel(http: httpx.Client, deployment: Deployment) -> None:
    run_id = submit(http, deployment.ledger)
    wait_status(http, run_id, "waiting")
    response = http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "changed my mind"}, headers=A)
    assert response.status_code == 202, response.text
    assert response.json()["changed"] is True
    run = wait_status(http, run_id, "cancelled")
    assert "changed my mind" in (run["reason"] or "")
    again = http.post(f"/v1/runs/{run_id}/cancel", headers=A)  # no body: the default reason
    assert again.status_code == 409
    assert error_code(again) == "illegal_transition"


def test_schedules_are_kept_per_namespace_and_backfilled(
    http: httpx.Client, deployment: Deployment
) -> None:
    body = {
        "name": "nightly",
        "workflow": "ticking",
        "cron": "0 2 * * *",
        "timezone": "Europe/Berlin",
        "input": {"ledger": str(deployment.ledger)},
        "overlap": "buffer_one",
        "catch_up": "2h",
        "jitter": 30,
        "paused": True,
    }
    created = http.post("/v1/schedules", json=body, headers=A)
    assert created.status_code == 201, created.text
    view = created.json()
    assert (view["cron"], view["overlap"], view["catch_up_s"], view["jitter_s"]) == (
        "0 2 * * *",
        "buffer_one",
        7200,
        30,
    )
    assert view["paused"] is True and view["next_at"] is not None
    again = http.post("/v1/schedules", json=body, headers=A)
    assert again.status_code == 409 and error_code(again) == "schedule_exists"
    # Typed refusals: a bad cron or zone, an unknown workflow, an unknown policy.
    bad_cron = http.post("/v1/schedules", json={**body, "name": "b", "cron": "0 2 * *"}, headers=A)
    assert bad_cron.status_code == 422 and error_code(bad_cron) == "invalid_schedule"
    bad_zone = http.post(
        "/v1/schedules", json={**body, "name": "b", "timezone": "Nowhere/X"}, headers=A
    )
    assert bad_zone.status_code == 422 and error_code(bad_zone) == "invalid_schedule"
    unknown = http.post("/v1/schedules", json={**body, "name": "b", "workflow": "nope"}, headers=A)
    assert unknown.status_code == 404 and error_code(unknown) == "unknown_workflow"
    policy = http.post("/v1/schedules", json={**body, "name": "b", "overlap": "queue"}, headers=A)
    assert policy.status_code == 422 and error_code(policy) == "validation_error"
    # Another namespace sees none of it.
    assert http.get("/v1/schedules/nightly", headers=B).status_code == 404
    assert http.get("/v1/schedules", headers=B).json()["schedules"] == []
    changed = http.patch("/v1/schedules/nightly", json={"cron": "30 3 * * *"}, headers=A)
    assert changed.status_code == 200 and changed.json()["cron"] == "30 3 * * *"
    assert http.post("/v1/schedules/nightly/resume", headers=A).json()["paused"] is False
    assert http.post("/v1/schedules/nightly/pause", headers=A).json()["paused"] is True
    # Three days of a daily schedule, then the same again: nothing new.
    window = {"start": 1_796_083_200.0, "end": 1_796_083_200.0 + 3 * 86_400}
    filled = http.post("/v1/schedules/nightly/backfill", json=window, headers=A).json()
    assert (filled["ticks"], filled["created"], filled["existing"]) == (3, 3, 0)
    refilled = http.post("/v1/schedules/nightly/backfill", json=window, headers=A).json()
    assert (refilled["created"], refilled["existing"]) == (0, 3)
    for run_id in filled["run_ids"]:
        wait_status(http, run_id, "succeeded")
    shown = http.get("/v1/schedules/nightly", headers=A).json()
    assert sorted(run["run_id"] for run in shown["runs"]) == sorted(filled["run_ids"])
    assert http.get(f"/v1/runs/{filled['run_ids'][0]}", headers=B).status_code == 404
    assert http.delete("/v1/schedules/nightly", headers=A).status_code == 204
    assert http.get("/v1/schedules/nightly", headers=A).status_code == 404


def test_debounce_and_singleton_on_submit(http: httpx.Client, deployment: Deployment) -> None:
    def post(**flow: Any) -> httpx.Response:
        return http.post(
            "/v1/runs",
            json={"workflow": "approval", "input": {"ledger": str(deployment.ledger)}, **flow},
            headers=A,
        )

    debounce = {"key": f"d-{uuid.uuid4().hex}", "wait": "0.5s", "max_wait": 10}
    ids = {post(debounce=debounce).json()["run_id"] for _ in range(3)}
    assert len(ids) == 1
    wait_status(http, ids.pop(), "waiting")  # started once its submissions paused
    key = f"s-{uuid.uuid4().hex}"
    first = post(singleton={"key": key}).json()["run_id"]
    assert post(singleton={"key": key, "mode": "skip"}).json()["run_id"] == first
    second = post(singleton={"key": key, "mode": "cancel"}).json()["run_id"]
    assert second != first
    replaced = http.get(f"/v1/runs/{first}", headers=A).json()
    assert replaced["status"] in ("cancelling", "cancelled")
    refused = post(debounce={"key": "k", "wait": "soon"})
    assert refused.status_code == 422 and error_code(refused) == "invalid_input"
    both = post(debounce={"key": "k", "wait": 1}, singleton={"key": "k"})
    assert both.status_code == 422


def test_artifacts(http: httpx.Client, deployment: Deployment) -> None:
    run_id = submit(http, deployment.ledger, "artifacts", topic="cairns")
    wait_status(http, run_id, "succeeded")
    found = http.get(f"/v1/runs/{run_id}/artifacts", headers=A).json()["artifacts"]
    assert found, "the artifacts workflow puts artifacts"
    assert all(a["run_id"] == run_id and len(a["sha256"]) == 64 for a in found)
    name = found[0]["name"]
    only = http.get(f"/v1/runs/{run_id}/artifacts?name={name}", headers=A).json()["artifacts"]
    assert {a["name"] for a in only} == {name}


# -- streaming --------------------------------------------------------------------------


def read_sse(
    http: httpx.Client,
    run_id: str,
    count: int | None,
    last_event_id: int | None = None,
    progress: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Events until ``count`` were read (then the connection is dropped) or the stream
    ends; and the end event, if it came. Progress messages go to ``progress``."""
    headers = dict(A)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[dict[str, Any]] = []
    end = None
    with http.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers, timeout=20) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields.get("event") == "end":
                end = json.loads(fields["data"])
                break
            if fields.get("event") == "progress" and progress is not None:
                assert "id" not in fields  # a reconnect resumes after events only
                progress.append(json.loads(fields["data"]))
            if "id" in fields:
                event = json.loads(fields["data"])
                assert int(fields["id"]) == event["seq"]
                assert fields["event"] == event["type"]
                events.append(event)
                if count is not None and len(events) >= count:
                    break  # drop the connection mid-stream
            fields = {}
    return events, end


def test_stream_resumes_after_a_dropped_connection(
    http: httpx.Client, deployment: Deployment
) -> None:
    run_id = submit(http, deployment.ledger)
    wait_status(http, run_id, "waiting")
    first, end = read_sse(http, run_id, count=1)
    assert end is None
    assert [e["seq"] for e in first] == [1]
    # While nobody listens, the run goes on.
    http.post(f"/v1/runs/{run_id}/signals/approve", json={}, headers=A)
    rest, end = read_sse(http, run_id, count=None, last_event_id=first[-1]["seq"])
    assert end is not None and end["status"] == "succeeded"
    log = http.get(f"/v1/runs/{run_id}/events", headers=A).json()["events"]
    assert first + rest == log  # exactly the rest: nothing twice, nothing lost
    assert [e["seq"] for e in rest] == list(range(2, len(log) + 1))


def test_stream_follows_a_live_run(http: httpx.Client, deployment: Deployment) -> None:
    run_id = submit(http, deployment.ledger, "chain10", slow={"n5": 0.5})
    events, end = read_sse(http, run_id, count=None)
    assert end == {"status": "succeeded", "last_seq": events[-1]["seq"]}
    assert events == http.get(f"/v1/runs/{run_id}/events", headers=A).json()["events"]
    caught_up, end = read_sse(http, run_id, count=None, last_event_id=events[-1]["seq"])
    assert caught_up == []
    assert end is not None


def test_stream_carries_heartbeat_progress(http: httpx.Client, deployment: Deployment) -> None:
    run_id = submit(http, deployment.ledger, "paging", page_s=0.6)
    progress: list[dict[str, Any]] = []
    events, end = read_sse(http, run_id, count=None, progress=progress)
    assert end is not None and end["status"] == "succeeded"
    beats = [p["running"]["read#1"] for p in progress if "read#1" in p["running"]]
    assert all(beat["worker"] for beat in beats)  # from the claim on, before any progress
    reports = [beat for beat in beats if beat["done"] is not None]
    pages = sorted({report["done"] for report in reports})
    assert pages[-1] == 3.0 and len(pages) >= 2, reports  # each page seen as it came
    for report in reports:
        assert report["total"] == 3.0
        assert report["message"] == f"page {int(report['done'])}"
        assert report["worker"]
        assert report["age_s"] >= 0
        assert report["eta_s"] is not None and report["eta_s"] >= 0
    assert {p["seq"] for p in progress} <= {e["seq"] for e in events}


# -- metrics and latency ----------------------------------------------------------------


def test_metrics_count_by_route_and_submit_latency(
    http: httpx.Client, deployment: Deployment
) -> None:
    latencies = []
    for i in range(200):
        started = time.perf_counter()
        response = http.post(
            "/v1/runs", json={"workflow": "approval", "input": {"i": i}}, headers=A
        )
        latencies.append(time.perf_counter() - started)
        assert response.status_code == 202
    latencies.sort()
    p50, p99 = statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]
    print(f"\nsubmit through the API: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    text = http.get("/metrics").text
    assert 'cairn_api_requests_total{method="POST",route="/v1/runs",status="202"}' in text
    assert 'route="/v1/runs/{run_id}"' in text
    assert 'cairn_api_runs_submitted_total{kind="single",outcome="created"}' in text
    assert (
        'cairn_api_request_duration_seconds_bucket{le="0.05",method="POST",route="/v1/runs"}'
        in text
    )


# -- schemathesis -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def api_schema(deployment: Deployment) -> Any:
    return schemathesis.openapi.from_url(f"{deployment.base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors_for_any_request(case: Any) -> None:
    response = case.call(headers=A, timeout=10)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text)


# -- webhooks ---------------------------------------------------------------------------


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int


class Receiver:
    """A webhook receiver on loopback that records every request and fails the first
    delivery of each event id with a 500."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                event_id = self.headers.get("Cairn-Event-Id", "")
                with receiver.lock:
                    seen = any(
                        d.headers.get("Cairn-Event-Id") == event_id for d in receiver.deliveries
                    )
                    status = 200 if seen else 500
                    receiver.deliveries.append(
                        Delivery(self.path, dict(self.headers.items()), body, status)
                    )
                self.send_response(status)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/cairn"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def taken(self) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.answered == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hooks = Receiver()
    yield hooks
    hooks.close()


def test_signed_webhooks_are_delivered_and_retried_after_a_500(
    http: httpx.Client, deployment: Deployment, receiver: Receiver
) -> None:
    run_id = submit(http, deployment.ledger, webhook=receiver.url)
    wait_status(http, run_id, "waiting")
    signal = {"payload": {"note": "ok"}}
    assert http.post(f"/v1/runs/{run_id}/signals/approve", json=signal, headers=A).is_success
    wait_status(http, run_id, "succeeded")
    deadline = time.monotonic() + 30
    while len(receiver.taken()) < 2:
        assert time.monotonic() < deadline, f"webhooks not delivered: {receiver.deliveries}"
        time.sleep(0.05)

    # Announced in the run's order; the retries after the 500s are jittered, so the two
    # second attempts may come either way round.
    first_tries = [d for d in receiver.deliveries if d.headers["Cairn-Delivery-Attempt"] == "1"]
    assert [d.headers["Cairn-Event-Type"] for d in first_tries] == ["run.waiting", "run.succeeded"]
    taken = {d.headers["Cairn-Event-Type"]: d for d in receiver.taken()}
    assert sorted(taken) == ["run.succeeded", "run.waiting"]
    for event_id in {d.headers["Cairn-Event-Id"] for d in receiver.deliveries}:
        tries = [d for d in receiver.deliveries if d.headers["Cairn-Event-Id"] == event_id]
        # Refused once with a 500, then delivered again: the same event, body and id.
        assert [d.answered for d in tries] == [500, 200]
        assert [d.headers["Cairn-Delivery-Attempt"] for d in tries] == ["1", "2"]
        assert tries[0].body == tries[1].body
    for delivery in receiver.deliveries:
        assert delivery.path == "/hooks/cairn"
        verify(delivery.body, delivery.headers["Cairn-Signature"], WEBHOOK_SECRET)
        with pytest.raises(WebhookSignatureError):
            verify(delivery.body + b" ", delivery.headers["Cairn-Signature"], WEBHOOK_SECRET)
        with pytest.raises(WebhookSignatureError):
            verify(delivery.body, delivery.headers["Cairn-Signature"], "another-secret-0123456")
    waiting, succeeded = (json.loads(taken[kind].body) for kind in ("run.waiting", "run.succeeded"))
    assert waiting["run"]["waiting_for"] == ["review"]
    assert succeeded["id"] == f"{run_id}.{succeeded['run']['seq']}"
    assert succeeded["run"]["status"] == "succeeded"
    assert succeeded["run"]["result"]["decisions"]["review"]["actor"] == ALPHA
    # The run's owner sees the deliveries: each taken at the second attempt, after a 500
    # (recorded once the receiver's answer is back: a moment after it got the request).
    deadline = time.monotonic() + 10
    while True:
        deliveries = http.get(f"/v1/runs/{run_id}", headers=A).json()["webhooks"]
        if all(d["state"] == "delivered" for d in deliveries) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [(d["type"], d["state"], d["attempts"], d["last_status"]) for d in deliveries] == [
        ("run.waiting", "delivered", 2, 200),
        ("run.succeeded", "delivered", 2, 200),
    ]


def test_a_webhook_needs_a_signing_secret_and_an_allowed_host(
    http: httpx.Client, deployment: Deployment, receiver: Receiver
) -> None:
    run = {"workflow": "approval", "input": {"ledger": str(deployment.ledger)}}
    no_secret = http.post("/v1/runs", json={**run, "webhook": receiver.url}, headers=B)
    assert no_secret.status_code == 422
    assert "no signing secret" in no_secret.json()["error"]["message"]
    elsewhere = http.post(
        "/v1/runs", json={**run, "webhook": "https://hooks.example.com/x"}, headers=A
    )
    assert elsewhere.status_code == 422
    assert "not one webhooks may call" in elsewhere.json()["error"]["message"]
    not_http = http.post("/v1/runs", json={**run, "webhook": "file:///etc/passwd"}, headers=A)
    assert not_http.status_code == 422
    batch = http.post(
        "/v1/runs:batch",
        json={"runs": [{**run, "webhook": receiver.url}, {**run, "webhook": "ftp://x"}]},
        headers=A,
    ).json()
    assert batch["created"] == 1
    assert batch["results"][1]["error"]["code"] == "invalid_input"


def test_fork_is_live_only_when_confirmed(http: httpx.Client, deployment: Deployment) -> None:
    run_id = submit(http, deployment.ledger)
    parked = wait_status(http, run_id, "waiting")
    body = {"at_seq": parked["last_seq"], "patch": {"note": "from the fork"}}
    unconfirmed = http.post(f"/v1/runs/{run_id}/fork", json=body, headers=A)
    assert unconfirmed.status_code == 409
    assert error_code(unconfirmed) == "confirmation_required"
    assert (
        http.post(f"/v1/runs/{run_id}/fork", json={**body, "confirm": True}, headers=B).status_code
        == 404
    )
    beyond = http.post(f"/v1/runs/{run_id}/fork", json={"at_seq": 99, "confirm": True}, headers=A)
    assert beyond.status_code == 422

    forked = http.post(f"/v1/runs/{run_id}/fork", json={**body, "confirm": True}, headers=A)
    assert forked.status_code == 202, forked.text
    fork = forked.json()
    assert (fork["parent_run_id"], fork["fork_seq"]) == (run_id, parked["last_seq"])
    assert forked.headers["location"] == fork["status_url"]
    view = wait_status(http, fork["run_id"], "waiting")  # at the same wait, as a new visit
    assert (view["parent_run_id"], view["fork_seq"]) == (run_id, parked["last_seq"])
    assert view["vars"]["note"] == "from the fork"
    assert view["nodes"]["review"] == "waiting"
    assert http.get(f"/v1/runs/{run_id}", headers=A).json()["status"] == "waiting"  # untouched
