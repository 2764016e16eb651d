"""Namespaced definitions against a real ``cairn api`` on PostgreSQL with a worker and the
scheduler: two namespaces register one name with different definitions and each run
executes its own; a namespace cannot see or start another's workflow — 404, as if it did
not exist, nothing written — until that namespace's admin shares it; the run it then
starts is its own and executes the owner's definition; revoking stops new starts; the
CLI registers into a namespace and shares in the direct mode.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.api_server import Deployment, api_deployment, bearer

ALPHA = "alpha-namespaces-key-0123456789"
BETA = "beta-namespaces-key-01234567890"
STEP = "tests.integration.handlers:step"


def checkout(node: str, version: int = 1) -> dict[str, Any]:
    """``checkout``: one step, named ``node``, then done."""
    return {
        "name": "checkout",
        "version": version,
        "start": node,
        "nodes": {node: {"handler": STEP, "next": "done"}, "done": {"end": "succeeded"}},
    }


# Beta's checkout, as its file holds it: YAML.
BETA_CHECKOUT = f"""\
name: checkout
version: 1
start: refund
nodes:
  refund: {{handler: "{STEP}", next: done}}
  done: {{end: succeeded}}
"""


@pytest.fixture(scope="module")
def deployment(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("namespaces")
    keys = {"CAIRN_API_KEYS": f"alpha:{ALPHA},beta:{BETA}"}
    with api_deployment(pg_template, tmp, api_env=keys) as deployed:
        yield deployed


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.base_url, timeout=20) as client:
        yield client


def submit(http: httpx.Client, key: str, workflow: str, ledger: str) -> httpx.Response:
    body = {"workflow": workflow, "input": {"ledger": ledger}}
    return http.post("/v1/runs", json=body, headers=bearer(key))


def finished(http: httpx.Client, key: str, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run: dict[str, Any] = http.get(f"/v1/runs/{run_id}", headers=bearer(key)).json()
        if run["status"] == "succeeded":
            return run
        assert run["status"] in ("pending", "running"), run
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def runs_of(http: httpx.Client, key: str) -> list[str]:
    listed = http.get("/v1/runs?limit=500", headers=bearer(key)).json()["runs"]
    return sorted(run["id"] for run in listed)


def test_two_namespaces_run_their_own_definition_of_one_name(
    http: httpx.Client, deployment: Deployment
) -> None:
    ledger = str(deployment.ledger)
    mine = http.post("/v1/workflows", json=checkout("charge"), headers=bearer(ALPHA))
    assert mine.status_code == 201, mine.text
    assert mine.json() == {"namespace": "alpha", "name": "checkout", "version": 1, "created": True}
    yaml = {**bearer(BETA), "Content-Type": "application/yaml"}
    theirs = http.post("/v1/workflows", content=BETA_CHECKOUT, headers=yaml)
    assert theirs.status_code == 201, theirs.text
    # The same again changes nothing; a changed one under a registered version is refused.
    again = http.post("/v1/workflows", json=checkout("charge"), headers=bearer(ALPHA))
    assert (again.status_code, again.json()["created"]) == (200, False)
    changed = http.post("/v1/workflows", json=checkout("refund"), headers=bearer(ALPHA))
    assert changed.status_code == 409, changed.text
    assert changed.json()["error"]["code"] == "version_conflict"
    kept = http.get("/v1/workflows/checkout", headers=bearer(ALPHA)).json()
    assert list(kept["spec"]["nodes"]) == ["charge", "done"] and kept["namespace"] == "alpha"
    invalid = http.post("/v1/workflows", content="name: [", headers=yaml)
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_definition"

    started = {key: submit(http, key, "checkout", ledger) for key in (ALPHA, BETA)}
    assert all(answer.status_code == 202 for answer in started.values())
    alpha_run = finished(http, ALPHA, started[ALPHA].json()["run_id"])
    beta_run = finished(http, BETA, started[BETA].json()["run_id"])
    assert (alpha_run["namespace"], alpha_run["workflow_namespace"]) == ("alpha", "alpha")
    assert (beta_run["namespace"], beta_run["workflow_namespace"]) == ("beta", "beta")
    # Each ran its own definition's node: the handlers' ledger says so, not cairn.
    ran = [line.split()[:2] for line in deployment.ledger.read_text().splitlines()]
    assert [alpha_run["id"], "charge"] in ran and [beta_run["id"], "refund"] in ran
    assert [alpha_run["id"], "refund"] not in ran and [beta_run["id"], "charge"] not in ran


def test_a_workflow_is_unseen_until_shared_and_its_run_is_the_grantees(
    http: httpx.Client, deployment: Deployment
) -> None:
    ledger = str(deployment.ledger)
    report = {**checkout("compile"), "name": "report"}
    assert http.post("/v1/workflows", json=report, headers=bearer(ALPHA)).status_code == 201
    before = runs_of(http, BETA)
    listed = http.get("/v1/workflows", headers=bearer(BETA)).json()["workflows"]
    assert "report" not in {w["name"] for w in listed}
    # Not shared: 404 however it is named — as for a workflow that does not exist.
    for answer in (
        http.get("/v1/workflows/report", headers=bearer(BETA)),
        http.get("/v1/workflows/report?namespace=alpha", headers=bearer(BETA)),
        submit(http, BETA, "report", ledger),
        submit(http, BETA, "alpha/report", ledger),
        submit(http, BETA, "alpha/report@1", ledger),
        http.post("/v1/workflows/report/shares", json={"namespace": "gamma"}, headers=bearer(BETA)),
    ):
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "unknown_workflow"
    missing = submit(http, BETA, "alpha/no_such_workflow", ledger).json()["error"]["message"]
    hidden = submit(http, BETA, "alpha/report", ledger).json()["error"]["message"]
    assert hidden.replace("report", "no_such_workflow") == missing  # tells nothing more
    assert runs_of(http, BETA) == before  # nothing written

    share = {"namespace": "beta", "version": 1}
    shared = http.post("/v1/workflows/report/shares", json=share, headers=bearer(ALPHA))
    assert shared.status_code == 201, shared.text
    assert shared.json()["grantee"] == "beta" and shared.json()["version"] == 1
    seen = http.get("/v1/workflows", headers=bearer(BETA)).json()["workflows"]
    assert {"namespace": "alpha", "name": "report", "version": 1, "shared": True}.items() <= next(
        w for w in seen if w["name"] == "report"
    ).items()
    assert http.get("/v1/workflows/report", headers=bearer(BETA)).json()["namespace"] == "alpha"
    started = submit(http, BETA, "report", ledger)
    assert started.status_code == 202, started.text
    run = finished(http, BETA, started.json()["run_id"])
    assert (run["namespace"], run["workflow_namespace"]) == ("beta", "alpha")
    assert [run["id"], "compile"] in [
        line.split()[:2] for line in deployment.ledger.read_text().splitlines()
    ]
    # The run is beta's: alpha, whose definition it ran, cannot see it.
    assert http.get(f"/v1/runs/{run['id']}", headers=bearer(ALPHA)).status_code == 404

    revoked = http.delete("/v1/workflows/report/shares/beta?version=1", headers=bearer(ALPHA))
    assert revoked.status_code == 204, revoked.text
    assert submit(http, BETA, "report", ledger).status_code == 404
    assert http.get(f"/v1/runs/{run['id']}", headers=bearer(BETA)).status_code == 200
    entries = http.get("/v1/audit?limit=1000", headers=bearer(ALPHA)).json()["entries"]
    done = {(e["action"], e["outcome"], e["target"]) for e in entries}
    assert {
        ("definitions.share", "ok", "report"),
        ("definitions.unshare", "ok", "report"),
        ("definitions.register", "ok", "alpha/report@1"),
    } <= done


def test_the_cli_registers_into_a_namespace_and_shares_in_the_direct_mode(
    http: httpx.Client, deployment: Deployment, tmp_path: Any
) -> None:
    cluster = deployment.cluster
    path = tmp_path / "nightly.json"
    path.write_text(json.dumps({**checkout("collect"), "name": "nightly"}))
    registered = cluster.cli("register", str(path), "--namespace", "alpha")
    assert registered.returncode == 0, registered.stderr
    assert "registered nightly@1 in alpha" in registered.stdout
    assert http.get("/v1/workflows/nightly", headers=bearer(BETA)).status_code == 404
    added = cluster.cli("shares", "add", "nightly", "--with", "beta", "--namespace", "alpha")
    assert added.returncode == 0, added.stderr
    listed = cluster.cli("shares", "list", "--namespace", "alpha", "--json")
    shares = json.loads(listed.stdout)
    assert {"workflow": "nightly", "grantee": "beta", "version": None}.items() <= shares[0].items()
    started = submit(http, BETA, "alpha/nightly", str(deployment.ledger))
    assert started.status_code == 202, started.text
    revoked = cluster.cli("shares", "revoke", "nightly", "--with", "beta", "--namespace", "alpha")
    assert revoked.returncode == 0, revoked.stderr
    assert submit(http, BETA, "alpha/nightly", str(deployment.ledger)).status_code == 404
    again = cluster.cli("shares", "revoke", "nightly", "--with", "beta", "--namespace", "alpha")
    assert again.returncode == 2 and "does not share" in again.stderr
