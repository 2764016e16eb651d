"""Pausing a workflow's new starts, or a queue, against a real ``cairn api`` with a worker
and the scheduler on PostgreSQL and Redis: held starts lose nothing and start as their
submitters; a paused queue's messages wait — even one a worker had already received —
and run once when it resumes; submissions racing pauses and resumes are all started;
and held starts a dead resume left behind are started by the scheduler.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from cairn.access.authenticate import config_key_name
from tests.support.api_server import Deployment, api_deployment, mint_keys_over_http

ADMIN = "pause-bootstrap-key-0123456789ab"
ADMIN_ACTOR = f"key:{config_key_name(ADMIN)}"


@pytest.fixture(scope="module")
def deployment(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("pauses")
    keys = {"CAIRN_API_KEYS": f"ops:{ADMIN}"}
    with api_deployment(pg_template, tmp, api_env=keys, namespaces=("ops",)) as d:
        yield d


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=deployment.base_url, timeout=60, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as client:
        yield client


@pytest.fixture(scope="module")
def keys(http: httpx.Client) -> dict[str, str]:
    return mint_keys_over_http(
        http, {"submitter": ("operator", False), "onlooker": ("viewer", False)}
    )


def as_(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def submit(http: httpx.Client, deployment: Deployment, key: str | None = None) -> str:
    body = {"workflow": "lookup", "input": {"ledger": str(deployment.ledger)}}
    headers = {} if key is None else {"Idempotency-Key": key}
    started = http.post("/v1/runs", json=body, headers=headers)
    assert started.status_code in (200, 202), started.text
    return str(started.json()["run_id"])


def status(http: httpx.Client, run_id: str) -> str:
    return str(http.get(f"/v1/runs/{run_id}").json()["status"])


def wait_for(http: httpx.Client, run_ids: list[str], wanted: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    for run_id in run_ids:
        while (found := status(http, run_id)) != wanted:
            assert found not in {"failed", "cancelled"} or found == wanted, (run_id, found)
            assert time.monotonic() < deadline, f"{run_id} is {found}, not {wanted}"
            time.sleep(0.05)


def events(http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return list(http.get(f"/v1/runs/{run_id}/events").json()["events"])


def ran(deployment: Deployment, run_id: str) -> int:
    counts = deployment.cluster.executions()
    return sum(n for (run, _node, _iteration), n in counts.items() if run == run_id)


def pause(http: httpx.Client, kind: str, name: str, **headers: str) -> httpx.Response:
    return http.post(f"/v1/pauses/{kind}/{name}", json={"reason": "provider upgrade"}, **headers)


def test_a_paused_workflow_holds_its_starts_and_resume_starts_them_as_their_submitters(
    http: httpx.Client, deployment: Deployment, keys: dict[str, str]
) -> None:
    refused = pause(http, "workflow", "lookup", headers=as_(keys["onlooker"]))
    assert refused.status_code == 403
    paused = pause(http, "workflow", "lookup")
    assert paused.status_code == 200 and paused.json()["created"] is True
    assert paused.json()["pause"]["paused_by"] == ADMIN_ACTOR
    again = pause(http, "workflow", "lookup")
    assert again.json()["created"] is False  # the first pause stands

    submitter = as_(keys["submitter"])
    one = submit(http, deployment, key="held-1")
    assert submit(http, deployment, key="held-1") == one  # idempotent while held
    body = {"workflow": "lookup", "input": {"ledger": str(deployment.ledger)}}
    two = http.post("/v1/runs", json=body, headers=submitter).json()["run_id"]
    batch = http.post("/v1/runs:batch", json={"runs": [body, body]}, headers=submitter)
    three, doomed = (r["run_id"] for r in batch.json()["results"])
    held = [one, two, three, doomed]

    time.sleep(2.5)  # the worker and the scheduler have had every chance to start them
    for run_id in held:
        assert status(http, run_id) == "pending" and events(http, run_id) == []
        assert ran(deployment, run_id) == 0
    listed = http.get("/v1/pauses").json()["pauses"]
    assert [(p["kind"], p["name"], p["held"]) for p in listed] == [("workflow", "lookup", 4)]
    assert http.post(f"/v1/runs/{doomed}/cancel", json={"reason": "not wanted"}).status_code == 202
    wait_for(http, [doomed], "cancelled")

    resumed = http.post("/v1/pauses/workflow/lookup/resume", headers=submitter)
    assert resumed.status_code == 200 and resumed.json()["started"] == 3
    wait_for(http, [one, two, three], "succeeded")
    starters = {run_id: events(http, run_id)[0] for run_id in (one, two, three)}
    assert {r: e["type"] for r, e in starters.items()} == dict.fromkeys(starters, "run_started")
    assert starters[one]["data"]["actor"] == ADMIN_ACTOR  # each run starts as who submitted it
    assert starters[two]["data"]["actor"] == starters[three]["data"]["actor"] == "key:submitter"
    assert ran(deployment, doomed) == 0
    assert http.get("/v1/pauses").json()["pauses"] == []
    gone = http.post("/v1/pauses/workflow/lookup/resume")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_paused"

    entries = http.get("/v1/audit?action=pause.change&limit=100").json()["entries"]
    assert sorted((e["actor"], e["outcome"]) for e in entries) == sorted(
        [
            ("key:onlooker", "refused"),
            (ADMIN_ACTOR, "ok"),
            (ADMIN_ACTOR, "ok"),
            ("key:submitter", "ok"),
            (ADMIN_ACTOR, "failed"),
        ]
    )


def test_a_paused_queue_holds_messages_even_one_a_worker_already_received(
    http: httpx.Client, deployment: Deployment
) -> None:
    cluster = deployment.cluster
    worker = cluster.processes[0]
    # A message in the broker before the pause: the worker is stopped while it is sent.
    cluster.signal(worker, signal.SIGSTOP)
    try:
        early = submit(http, deployment)
        assert pause(http, "queue", "cairn").status_code == 200
    finally:
        cluster.signal(worker, signal.SIGCONT)
    late = submit(http, deployment)  # started, but its first node's message is held
    time.sleep(2.5)
    for run_id in (early, late):
        assert status(http, run_id) == "running" and ran(deployment, run_id) == 0
        assert [e["type"] for e in events(http, run_id)] == ["run_started"]
    resumed = http.post("/v1/pauses/queue/cairn/resume")
    assert resumed.status_code == 200 and resumed.json()["started"] == 0
    wait_for(http, [early, late], "succeeded")
    for run_id in (early, late):
        counts = {key: n for key, n in cluster.executions().items() if key[0] == run_id}
        assert sorted(counts.values()) == [1, 1, 1], counts  # each node once


def test_submissions_racing_pauses_and_resumes_all_start(
    http: httpx.Client, deployment: Deployment
) -> None:
    run_ids: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def submitting() -> None:
        with httpx.Client(
            base_url=deployment.base_url, timeout=60, headers=dict(http.headers)
        ) as mine:
            # Paced: unpaced, three submitters start a thousand runs in the two seconds,
            # and waiting for them is most of the test; paced, about four hundred, still
            # one submission in flight at about a third of the moments a pause or a
            # resume lands.
            while not stop.wait(0.02):
                run_id = submit(mine, deployment)
                with lock:
                    run_ids.append(run_id)

    threads = [threading.Thread(target=submitting) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):
            assert pause(http, "workflow", "lookup").status_code == 200
            time.sleep(0.3)
            assert http.post("/v1/pauses/workflow/lookup/resume").status_code == 200
            time.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert len(run_ids) > 10
    wait_for(http, run_ids, "succeeded", timeout_s=120)  # none stranded, held or not


def test_held_starts_a_dead_resume_left_behind_are_started_by_the_scheduler(
    http: httpx.Client, deployment: Deployment
) -> None:
    assert pause(http, "workflow", "lookup").status_code == 200
    held = submit(http, deployment)
    assert status(http, held) == "pending"
    # A resume that deleted the pause, then died before it started what it held.
    engine = create_engine(deployment.cluster.settings.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM pauses WHERE name = 'lookup'"))
    finally:
        engine.dispose()
    wait_for(http, [held], "succeeded")
    assert events(http, held)[0]["data"]["actor"] == ADMIN_ACTOR
