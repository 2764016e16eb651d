"""Every operator action over HTTP, against a real ``cairn api`` with a worker and the
scheduler on PostgreSQL and Redis, and the effect service: a run's history, its state at
a seq and a diff; a replay and a fork's dry run that reach nothing outside; a rollback
and the compensations it runs; a flagged effect reconciled, then resolved by a person;
bulk cancel, signal and fork from the failure — counted by a dry run, then acted on
exactly the runs counted, in one audit entry each.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn.access.authenticate import config_key_name
from tests.support.api_server import Deployment, api_deployment, mint_keys_over_http
from tests.support.shop import ADAPTERS, Service, running_service

ADMIN = "ops-bootstrap-key-0123456789abc"
ACTOR = f"key:{config_key_name(ADMIN)}"


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    with running_service() as running:
        yield running


@pytest.fixture(scope="module")
def deployment(
    pg_template: str, tmp_path_factory: pytest.TempPathFactory, service: Service
) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("operations")
    env = {"EFFECT_SERVICE_URL": service.url, "CAIRN_EFFECT_ADAPTERS": ADAPTERS}
    keys = {"CAIRN_API_KEYS": f"ops:{ADMIN}"}
    with api_deployment(pg_template, tmp, env=env, api_env=keys, namespaces=("ops",)) as d:
        yield d


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=deployment.base_url, timeout=60, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as client:
        yield client


@pytest.fixture(scope="module")
def keys(http: httpx.Client) -> dict[str, str]:
    """An operator without the payloads permission, and a viewer."""
    return mint_keys_over_http(
        http, {"night-operator": ("operator", False), "watcher": ("viewer", False)}
    )


def as_(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def submit(http: httpx.Client, workflow: str, payload: dict[str, Any]) -> str:
    started = http.post("/v1/runs", json={"workflow": workflow, "input": payload})
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def wait_for(http: httpx.Client, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = http.get(f"/v1/runs/{run_id}").json()
        if run["status"] in statuses:
            return dict(run)
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def audit(http: httpx.Client, action: str) -> list[dict[str, Any]]:
    return list(http.get(f"/v1/audit?action={action}&limit=1000").json()["entries"])


def events_of(http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return list(http.get(f"/v1/runs/{run_id}/events").json()["events"])


# -- a run's timeline --------------------------------------------------------------------


def test_a_runs_history_state_and_diff_are_read_over_http(
    http: httpx.Client, deployment: Deployment, keys: dict[str, str]
) -> None:
    run_id = submit(http, "order", {"order": "t-1", "ledger": str(deployment.ledger)})
    wait_for(http, run_id, "succeeded")
    history = http.get(f"/v1/runs/{run_id}/history").json()
    assert [(s["node"], s["status"]) for s in history["steps"]] == [
        ("charge", "succeeded"),
        ("receipt", "succeeded"),
    ]
    charged = history["steps"][0]["seq"]
    state = http.get(f"/v1/runs/{run_id}/state", params={"at": charged}).json()
    assert state["seq"] == charged and state["state"]["vars"]["charge_id"]
    assert "email_id" not in state["state"]["vars"]
    diff = http.get(f"/v1/runs/{run_id}/diff", params={"from": charged, "to": history["last_seq"]})
    assert "vars.email_id" in {c["path"] for c in diff.json()["changes"]}

    # Without the payloads permission: the history's shape, never the state or a diff.
    night = as_(keys["night-operator"])
    assert http.get(f"/v1/runs/{run_id}/history", headers=night).json()["steps"]
    for path in (f"/v1/runs/{run_id}/state", f"/v1/runs/{run_id}/diff?from=1&to=2"):
        refused = http.get(path, headers=night)
        assert refused.status_code == 403 and "payloads" in refused.json()["error"]["message"]
    assert [e["outcome"] for e in audit(http, "run.state")] == ["ok", "refused"]


def test_a_replay_and_a_dry_run_reach_nothing_outside(
    http: httpx.Client, deployment: Deployment, service: Service, keys: dict[str, str]
) -> None:
    run_id = submit(http, "order", {"order": "t-2", "ledger": str(deployment.ledger)})
    wait_for(http, run_id, "succeeded")
    before = service.stats()["requested"]

    replayed = http.post(f"/v1/runs/{run_id}/replay", json={})
    assert replayed.status_code == 200, replayed.text
    report = replayed.json()
    assert report["diverged"] is False and [s["verdict"] for s in report["steps"]] == [
        "same",
        "same",
    ]
    dry = http.post(f"/v1/runs/{run_id}/fork/dry-run", json={"at_seq": 1})
    assert dry.status_code == 200, dry.text
    assert (dry.json()["ending"], dry.json()["went_well"]) == ("ended", True)
    assert service.stats()["requested"] == before  # nothing reached the service
    assert http.get("/v1/runs", params={"workflow": "order"}).json()["runs"][0]["id"] == run_id

    # An operator without payloads sees verdicts, not values.
    blind = http.post(f"/v1/runs/{run_id}/replay", json={}, headers=as_(keys["night-operator"]))
    assert blind.status_code == 200 and blind.json()["diverged"] is False
    charge_id = http.get(f"/v1/runs/{run_id}").json()["vars"]["charge_id"]
    assert charge_id in replayed.text and charge_id not in blind.text
    viewer = http.post(f"/v1/runs/{run_id}/replay", json={}, headers=as_(keys["watcher"]))
    assert viewer.status_code == 403


# -- repairs -----------------------------------------------------------------------------


def test_a_rollback_names_its_compensations_before_and_when_it_runs_them(
    http: httpx.Client, deployment: Deployment
) -> None:
    run_id = submit(http, "booking", {"ledger": str(deployment.ledger)})
    seq = wait_for(http, run_id, "waiting")["last_seq"]
    plan = http.get(f"/v1/runs/{run_id}/rollback").json()
    assert [(c["node"], c["compensation"]) for c in plan["compensations"]] == [
        ("charge", "tests.integration.handlers:undo"),
        ("reserve", "tests.integration.handlers:undo"),
    ]
    one = http.get(f"/v1/runs/{run_id}/rollback", params={"step": "reserve"}).json()
    assert [c["node"] for c in one["compensations"]] == ["reserve"]

    unconfirmed = http.post(f"/v1/runs/{run_id}/rollback", json={"reason": "customer left"})
    assert unconfirmed.status_code == 409
    assert unconfirmed.json()["error"]["code"] == "confirmation_required"
    assert wait_for(http, run_id, "waiting")["last_seq"] == seq  # nothing written

    done = http.post(
        f"/v1/runs/{run_id}/rollback", json={"reason": "customer left", "confirm": True}
    )
    assert done.status_code == 202, done.text
    assert done.json()["compensations"] == plan["compensations"]
    wait_for(http, run_id, "rolled_back")
    undone = [line.split()[1] for line in undo_lines(deployment.ledger, run_id)]
    assert undone == ["charge", "reserve"]
    asked = next(e for e in events_of(http, run_id) if e["type"] == "rollback_requested")
    assert asked["data"]["actor"] == ACTOR


def undo_lines(ledger: Path, run_id: str) -> list[str]:
    return [
        line
        for line in ledger.read_text().splitlines()
        if line.startswith(run_id) and line.split()[4] == "undo"
    ]


def test_a_flagged_effect_is_reconciled_then_resolved_by_a_person(
    http: httpx.Client, deployment: Deployment, service: Service, keys: dict[str, str]
) -> None:
    run_id = submit(http, "order", {"order": "t-3", "ledger": str(deployment.ledger)})
    wait_for(http, run_id, "succeeded")
    service.call("DELETE", "/charges/t-3:charge")  # refunded by hand, outside cairn

    drift = http.post("/v1/reconcile", json={"grace_s": 0})
    assert drift.status_code == 200, drift.text
    (entry,) = [e for e in drift.json()["needs_human"] if e["run_id"] == run_id]
    assert (entry["key"], entry["reason"]) == ("t-3:charge", "missing_externally")
    ledger = {e["key"]: e for e in http.get(f"/v1/runs/{run_id}/effects").json()["effects"]}
    assert ledger["t-3:charge"]["status"] == "flagged"

    path = f"/v1/runs/{run_id}/effects/resolve"
    body = {"outcome": "compensated", "note": "refunded by support, ticket 812"}
    denied = http.post(path, params={"key": "t-3:charge"}, json=body, headers=as_(keys["watcher"]))
    assert denied.status_code == 403
    resolved = http.post(
        path, params={"key": "t-3:charge"}, json=body, headers=as_(keys["night-operator"])
    )
    assert resolved.status_code == 200, resolved.text
    effect = resolved.json()["effect"]
    assert effect["status"] == "compensated"
    assert effect["resolution"]["by"] == "key:night-operator"
    assert effect["resolution"]["was"] == "flagged"
    assert effect["resolution"]["note"] == "refunded by support, ticket 812"
    again = http.post(path, params={"key": "t-3:charge"}, json=body)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "effect_not_open")
    missing = http.post(path, params={"key": "nope"}, json=body)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "effect_not_found")

    later = http.post("/v1/reconcile", json={"grace_s": 0}).json()
    assert not [e for e in later["needs_human"] if e["run_id"] == run_id]
    (entry,) = [e for e in audit(http, "effect.resolve") if e["outcome"] == "ok"]
    assert entry["actor"] == "key:night-operator" and entry["target"] == run_id
    assert entry["detail"]["outcome"] == "compensated"


# -- bulk --------------------------------------------------------------------------------


def test_bulk_cancel_counts_then_cancels_exactly_the_runs_counted(
    http: httpx.Client, deployment: Deployment
) -> None:
    ledger = str(deployment.ledger)
    since = time.time() - 1
    waiting = [submit(http, "approval", {"ledger": ledger, "batch": "b"}) for _ in range(4)]
    bystander = submit(http, "booking", {"ledger": ledger})
    for run_id in [*waiting, bystander]:
        wait_for(http, run_id, "waiting")
    selection = {"workflow": "approval", "status": ["waiting"], "created_after": since}

    counted = http.post("/v1/bulk/cancel", json={"filter": selection})
    assert counted.status_code == 200, counted.text
    assert counted.json()["dry_run"] is True and counted.json()["matched"] == 4
    assert sorted(counted.json()["run_ids"]) == sorted(waiting)
    assert all(wait_for(http, r, "waiting") for r in waiting)  # a dry run changes nothing

    late = submit(http, "approval", {"ledger": ledger})
    wait_for(http, late, "waiting")
    act = {"filter": selection, "dry_run": False, "reason": "campaign withdrawn"}
    changed = http.post("/v1/bulk/cancel", json={**act, "selection": counted.json()["selection"]})
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "selection_changed"
    assert wait_for(http, late, "waiting")

    recounted = http.post("/v1/bulk/cancel", json={"filter": selection}).json()
    assert recounted["matched"] == 5
    done = http.post("/v1/bulk/cancel", json={**act, "selection": recounted["selection"]})
    assert done.status_code == 200, done.text
    assert sorted(e["run_id"] for e in done.json()["done"]) == sorted([*waiting, late])
    for run_id in [*waiting, late]:
        wait_for(http, run_id, "cancelled")
        asked = next(e for e in events_of(http, run_id) if e["type"] == "cancel_requested")
        assert asked["data"]["actor"] == ACTOR
    assert wait_for(http, bystander, "waiting")

    (entry,) = [e for e in audit(http, "bulk.cancel") if not e["detail"]["dry_run"]][-1:]
    assert entry["outcome"] == "ok" and entry["target"] == recounted["selection"]
    assert sorted(entry["detail"]["done"]) == sorted([*waiting, late])
    assert entry["detail"]["filter"]["workflow"] == "approval"


def test_bulk_signal_and_fork_from_the_failure(http: httpx.Client, deployment: Deployment) -> None:
    ledger = str(deployment.ledger)
    since = time.time() - 1
    waiting = [submit(http, "approval", {"ledger": ledger, "batch": "s"}) for _ in range(3)]
    for run_id in waiting:
        wait_for(http, run_id, "waiting")
    approve = {"filter": {"ids": waiting}, "dry_run": False, "payload": {"ok": True}}
    signalled = http.post("/v1/bulk/signals/approve", json=approve)
    assert signalled.status_code == 200, signalled.text
    assert sorted(e["run_id"] for e in signalled.json()["done"]) == sorted(waiting)
    for run_id in waiting:
        wait_for(http, run_id, "succeeded")

    failed = [submit(http, "checkout", {"ledger": ledger, "permanent": True}) for _ in range(2)]
    for run_id in failed:
        wait_for(http, run_id, "failed")
    selection = {"workflow": "checkout", "created_after": since}
    counted = http.post("/v1/bulk/fork", json={"filter": selection}).json()
    assert sorted(counted["run_ids"]) == sorted(failed)
    fork = {"filter": selection, "dry_run": False, "patch": {"permanent": False}}
    forked = http.post("/v1/bulk/fork", json={**fork, "selection": counted["selection"]})
    assert forked.status_code == 200, forked.text
    forks = {e["run_id"]: e["fork"] for e in forked.json()["done"]}
    assert sorted(forks) == sorted(failed)
    for parent, child in forks.items():
        run = wait_for(http, child, "succeeded")
        assert run["parent_run_id"] == parent
        prepared = [s for s in history_steps(http, parent) if s["node"] == "prepare"]
        pay = next(s for s in history_steps(http, parent) if s["node"] == "pay")
        # The event that recorded prepare dispatched pay: the fork starts from there.
        assert run["fork_seq"] == pay["dispatched_seq"] == prepared[0]["seq"]
        assert [s["node"] for s in history_steps(http, child)] == ["pay"]  # prepare kept

    # Asked again, the same selection starts no second fork of a run.
    again = http.post("/v1/bulk/fork", json={**fork, "selection": counted["selection"]})
    assert {e["run_id"]: e["fork"] for e in again.json()["done"]} == forks
    wrong = http.post("/v1/bulk/fork", json={"filter": {"status": ["waiting"]}})
    assert wrong.status_code == 422


def history_steps(http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return list(http.get(f"/v1/runs/{run_id}/history").json()["steps"])
