"""The console's fleet activity without a browser (the embedded runtime): the workers
and their heartbeats, the queues' depths and the stalled nodes, on ``/v1/fleet/activity``
and on the fleet page, with a handler's progress message kept from whoever may not read
payloads, and another namespace's executions kept out. In a real browser:
tests/browser/test_console.py."""

from __future__ import annotations

from typing import Any

from cairn.model.keys import lease_key
from cairn.runtime import Runtime
from tests.embedded import test_console as shared
from tests.embedded.test_console import ADMIN, SECRET, client, sign_in, waiting_run

# The console tests' fixtures (an embedded runtime, its keys, the app), for this module.
runtime, keys, app = shared.runtime, shared.keys, shared.app


def test_the_fleet_shows_workers_queues_and_a_stalled_node_without_its_message(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    run_id = waiting_run(runtime)
    key = lease_key(run_id, "publish", 0, "run")
    record = {"worker": "box-7:4242", "done": 3, "total": 10, "message": SECRET}
    lease = runtime.leases.acquire(key, 60.0, record)
    assert lease is not None
    elsewhere = lease_key("not-a-run-of-this-namespace", "step", 0, "run")
    other = runtime.leases.acquire(elsewhere, 60.0, {"worker": "box-7:4242"})
    assert other is not None
    assert runtime.leases.flag_stalled(key)
    try:
        with client(app) as http:
            read = http.get("/v1/fleet/activity", headers={"Authorization": f"Bearer {ADMIN}"})
            assert read.status_code == 200, read.text
            body = read.json()
            (worker,) = [w for w in body["workers"] if w["worker"] == "box-7:4242"]
            assert worker["state"] == "alive" and worker["running"] == 2
            assert {q["queue"] for q in body["queues"]} >= {runtime.settings.queue}
            (stalled,) = [s for s in body["stalled"] if s["run_id"] == run_id]
            assert stalled["state"] == "stalled" and stalled["node"] == "publish"
            assert stalled["message"] == SECRET  # an admin reads payloads
            assert all(e["run_id"] != "not-a-run-of-this-namespace" for e in body["running"])

            sign_in(http, keys["vic"])  # a viewer without payloads
            page = http.get("/console/fleet")
            assert page.status_code == 200
            assert "box-7:4242" in page.text and f'data-run="{run_id}"' in page.text
            assert "3/10" in page.text and SECRET not in page.text
            assert "not-a-run" not in page.text
            assert f'data-queue="{runtime.settings.queue}"' in page.text
    finally:
        runtime.leases.release(lease)
        runtime.leases.release(other)


def test_code_a_worker_cannot_load_is_on_the_api_and_the_page_for_its_namespace(
    app: Any, runtime: Runtime, keys: dict[str, str]
) -> None:
    with runtime.store.transaction() as tx:
        tx.record_code_fault(
            "default", "shipping", 3, "box-9:77", fault="No module named 'shipping'", seen=2
        )
        tx.record_code_fault("elsewhere", "hidden", 1, "box-9:77", fault="theirs", seen=1)
    try:
        with client(app) as http:
            read = http.get("/v1/fleet/activity", headers={"Authorization": f"Bearer {ADMIN}"})
            (fault,) = read.json()["code_faults"]  # the namespace's own only
            assert (fault["workflow"], fault["version"], fault["worker"], fault["count"]) == (
                "shipping",
                3,
                "box-9:77",
                2,
            )
            sign_in(http, keys["vic"])
            page = http.get("/console/fleet").text
            assert 'data-workflow="shipping"' in page and "No module named" in page
            assert 'data-workflow="hidden"' not in page
    finally:
        with runtime.store.transaction() as tx:
            tx.clear_code_fault("default", "shipping", 3, "box-9:77")
            tx.clear_code_fault("elsewhere", "hidden", 1, "box-9:77")
