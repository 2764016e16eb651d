"""Who may do what, against a real ``cairn api`` (uvicorn) on PostgreSQL with a worker and
the scheduler: principals minted through the API itself, one per role with and without
the payloads permission, in two namespaces; every endpoint called by each, the expected
answer **written out below** (not read from the code's table); payloads hidden from
those without the permission; every privileged call — refusals included — in the audit
log under its principal; the actor of a write always the key's principal; a key compared
exactly as sent; a body naming a key twice refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cairn.access.authenticate import config_key_name
from tests.support.api_server import Deployment, api_deployment, bearer

ALPHA_ADMIN = "alpha-bootstrap-key-0123456789"
BETA_ADMIN = "beta-bootstrap-key-01234567890"
ROLES = ("viewer", "approver", "operator", "admin")
# Each principal: its role, and whether it may read payloads ("+p").
PRINCIPALS = [f"{role}{suffix}" for role in ROLES for suffix in ("", "+p")]


@pytest.fixture(scope="module")
def deployment(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("access")
    keys = f"alpha:{ALPHA_ADMIN},beta:{BETA_ADMIN}"
    api_env = {"CAIRN_API_KEYS": keys}
    with api_deployment(pg_template, tmp, api_env=api_env, namespaces=("alpha",)) as deployed:
        yield deployed


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.base_url, timeout=20) as client:
        yield client


# A definition alpha's admin registers and shares with gamma first: registering it again,
# identically, and sharing it again change nothing (200).
TINY = {"name": "tiny", "version": 1, "start": "done", "nodes": {"done": {"end": "succeeded"}}}


@pytest.fixture(scope="module")
def keys(http: httpx.Client) -> dict[str, str]:
    """A minted key per principal of alpha (``viewer``, ``viewer+p``, ...), and beta's
    operator's: made by the bootstrap admins, through the API."""
    made: dict[str, str] = {}
    for namespace, admin, names in (
        ("alpha", ALPHA_ADMIN, PRINCIPALS),
        ("beta", BETA_ADMIN, ["operator+p"]),
    ):
        for label in names:
            role, payloads = label.removesuffix("+p"), label.endswith("+p")
            name = label.replace("+p", "-p")
            created = http.post(
                "/v1/principals",
                json={"name": name, "role": role, "payloads": payloads},
                headers=bearer(admin),
            )
            assert created.status_code == 201, created.text
            minted = http.post(f"/v1/principals/{name}/keys", json={}, headers=bearer(admin))
            assert minted.status_code == 201, minted.text
            assert minted.json()["namespace"] == namespace
            made[label if namespace == "alpha" else f"beta {label}"] = minted.json()["key"]
    registered = http.post("/v1/workflows", json=TINY, headers=bearer(ALPHA_ADMIN))
    assert registered.status_code == 201, registered.text
    shared = http.post(
        "/v1/workflows/tiny/shares", json={"namespace": "gamma"}, headers=bearer(ALPHA_ADMIN)
    )
    assert shared.status_code == 201, shared.text
    return made


def finished_run(http: httpx.Client, deployment: Deployment) -> str:
    """An approval run of alpha, approved by its bootstrap admin and ended."""
    started = http.post(
        "/v1/runs",
        json={"workflow": "approval", "input": {"ledger": str(deployment.ledger)}},
        headers=bearer(ALPHA_ADMIN),
    )
    run_id = str(started.json()["run_id"])
    wait_for(http, run_id, "waiting")
    approved = http.post(
        f"/v1/runs/{run_id}/signals/approve",
        json={"payload": {"ok": 1}},
        headers=bearer(ALPHA_ADMIN),
    )
    assert approved.status_code == 200, approved.text
    wait_for(http, run_id, "succeeded")
    return run_id


def wait_for(http: httpx.Client, run_id: str, status: str) -> dict[str, Any]:
    import time  # noqa: PLC0415

    deadline = time.monotonic() + 60
    while True:
        run = http.get(f"/v1/runs/{run_id}", headers=bearer(ALPHA_ADMIN)).json()
        if run["status"] == status:
            return dict(run)
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


# Every endpoint, called so that an allowed caller gets a definite answer that changes
# nothing: a finished run to cancel, approve, settle or fork (unconfirmed), an unknown
# workflow to submit, a bad cron to schedule, an unknown key to revoke. The answer an
# allowed principal gets is the last element.
CALLS: dict[str, tuple[str, str, dict[str, Any] | None, int]] = {
    "list runs": ("GET", "/v1/runs", None, 200),
    "run counts": ("GET", "/v1/runs/counts", None, 200),
    "waiting": ("GET", "/v1/waiting", None, 200),
    "get run": ("GET", "/v1/runs/{run}", None, 200),
    "events": ("GET", "/v1/runs/{run}/events", None, 200),
    "stream": ("GET", "/v1/runs/{run}/stream", None, 200),
    "artifacts": ("GET", "/v1/runs/{run}/artifacts", None, 200),
    "model calls": ("GET", "/v1/runs/{run}/model-calls", None, 200),
    "artifact content": ("GET", "/v1/runs/{run}/artifacts/content?name=none&version=1", None, 404),
    "forks": ("GET", "/v1/runs/{run}/forks", None, 200),
    "anomalies": ("GET", "/v1/runs/{run}/anomalies", None, 200),
    "submit": ("POST", "/v1/runs", {"workflow": "no_such_workflow"}, 404),
    "batch": ("POST", "/v1/runs:batch", {"runs": [{"workflow": "no_such_workflow"}]}, 200),
    "approve": ("POST", "/v1/runs/{run}/signals/approve", {}, 409),
    "settle": ("POST", "/v1/runs/{run}/signals/recovery.retry", {}, 409),
    "cancel": ("POST", "/v1/runs/{run}/cancel", {}, 409),
    "fork": ("POST", "/v1/runs/{run}/fork", {"at_seq": 1}, 409),
    "history": ("GET", "/v1/runs/{run}/history", None, 200),
    "state": ("GET", "/v1/runs/{run}/state", None, 200),
    "diff": ("GET", "/v1/runs/{run}/diff?from=1&to=2", None, 200),
    "replay": ("POST", "/v1/runs/{run}/replay", {"from_seq": 100000}, 422),
    "dry run": ("POST", "/v1/runs/{run}/fork/dry-run", {"at_seq": 100000}, 422),
    "rollback plan": ("GET", "/v1/runs/{run}/rollback", None, 200),
    "rollback": ("POST", "/v1/runs/{run}/rollback", {"reason": "r"}, 409),
    "effects": ("GET", "/v1/runs/{run}/effects", None, 200),
    "resolve": (
        "POST",
        "/v1/runs/{run}/effects/resolve?key=none",
        {"outcome": "absent", "note": "n"},
        404,
    ),
    "reconcile": ("POST", "/v1/reconcile", {"limit": 1}, 200),
    "bulk cancel": ("POST", "/v1/bulk/cancel", {"filter": {"ids": ["none"]}}, 200),
    "bulk signal": ("POST", "/v1/bulk/signals/approve", {"filter": {"ids": ["none"]}}, 200),
    "bulk fork": ("POST", "/v1/bulk/fork", {"filter": {"ids": ["none"]}}, 200),
    "workflows": ("GET", "/v1/workflows", None, 200),
    "definition": ("GET", "/v1/workflows/tiny", None, 200),
    "register": ("POST", "/v1/workflows", TINY, 200),
    "share": ("POST", "/v1/workflows/tiny/shares", {"namespace": "gamma"}, 200),
    "shares": ("GET", "/v1/workflows/tiny/shares", None, 200),
    "all shares": ("GET", "/v1/shares", None, 200),
    "unshare": ("DELETE", "/v1/workflows/tiny/shares/nobody", None, 404),
    "fleet": ("GET", "/v1/fleet/concurrency", None, 200),
    "fleet activity": ("GET", "/v1/fleet/activity", None, 200),
    "schedules": ("GET", "/v1/schedules", None, 200),
    "add schedule": (
        "POST",
        "/v1/schedules",
        {"name": "m", "workflow": "approval", "cron": "x"},
        422,
    ),
    "pause schedule": ("POST", "/v1/schedules/none/pause", None, 404),
    "pauses": ("GET", "/v1/pauses", None, 200),
    "pause": ("POST", "/v1/pauses/workflow/no_such_workflow", {"reason": "r"}, 404),
    "resume": ("POST", "/v1/pauses/queue/none/resume", None, 404),
    "new principal": ("POST", "/v1/principals", {"name": "x", "role": "viewer", "z": 1}, 422),
    "keys": ("GET", "/v1/keys", None, 200),
    "revoke key": ("DELETE", "/v1/keys/aaaaaaaaaaaa", None, 404),
    "audit": ("GET", "/v1/audit", None, 200),
}

Y, N = True, False
# Who may: one column per principal, in the order of PRINCIPALS.
#                  viewer  +p   approver +p   operator +p   admin  +p
MATRIX: dict[str, tuple[bool, ...]] = {
    "list runs":      (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "run counts":     (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "waiting":        (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "get run":        (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "events":         (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "stream":         (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "artifacts":      (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "model calls":    (N, Y,   N, Y,   N, Y,   N, Y),
    "artifact content": (N, Y, N, Y,   N, Y,   N, Y),
    "forks":          (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "anomalies":      (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "submit":         (N, N,   N, N,   Y, Y,   Y, Y),
    "batch":          (N, N,   N, N,   Y, Y,   Y, Y),
    "approve":        (N, N,   Y, Y,   Y, Y,   Y, Y),
    "settle":         (N, N,   N, N,   Y, Y,   Y, Y),
    "cancel":         (N, N,   N, N,   Y, Y,   Y, Y),
    "fork":           (N, N,   N, N,   Y, Y,   Y, Y),
    "history":        (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "state":          (N, Y,   N, Y,   N, Y,   N, Y),
    "diff":           (N, Y,   N, Y,   N, Y,   N, Y),
    "replay":         (N, N,   N, N,   Y, Y,   Y, Y),
    "dry run":        (N, N,   N, N,   Y, Y,   Y, Y),
    "rollback plan":  (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "rollback":       (N, N,   N, N,   Y, Y,   Y, Y),
    "effects":        (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "resolve":        (N, N,   N, N,   Y, Y,   Y, Y),
    "reconcile":      (N, N,   N, N,   N, N,   Y, Y),
    "bulk cancel":    (N, N,   N, N,   Y, Y,   Y, Y),
    "bulk signal":    (N, N,   N, N,   Y, Y,   Y, Y),
    "bulk fork":      (N, N,   N, N,   Y, Y,   Y, Y),
    "workflows":      (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "definition":     (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "register":       (N, N,   N, N,   N, N,   Y, Y),
    "share":          (N, N,   N, N,   N, N,   Y, Y),
    "shares":         (N, N,   N, N,   N, N,   Y, Y),
    "all shares":     (N, N,   N, N,   N, N,   Y, Y),
    "unshare":        (N, N,   N, N,   N, N,   Y, Y),
    "fleet":          (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "fleet activity": (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "schedules":      (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "add schedule":   (N, N,   N, N,   Y, Y,   Y, Y),
    "pause schedule": (N, N,   N, N,   Y, Y,   Y, Y),
    "pauses":         (Y, Y,   Y, Y,   Y, Y,   Y, Y),
    "pause":          (N, N,   N, N,   Y, Y,   Y, Y),
    "resume":         (N, N,   N, N,   Y, Y,   Y, Y),
    "new principal":  (N, N,   N, N,   N, N,   Y, Y),
    "keys":           (N, N,   N, N,   N, N,   Y, Y),
    "revoke key":     (N, N,   N, N,   N, N,   Y, Y),
    "audit":          (N, N,   N, N,   N, N,   Y, Y),
}  # fmt: skip
# What each privileged call is written to the audit log as (reads of runs are not).
AUDITED = {
    "model calls": "run.model_calls",
    "artifact content": "run.artifact",
    "submit": "run.submit",
    "batch": "run.submit_batch",
    "approve": "run.signal",
    "settle": "run.recover",
    "cancel": "run.cancel",
    "fork": "run.fork",
    "state": "run.state",
    "diff": "run.diff",
    "replay": "run.replay",
    "dry run": "run.dry_run",
    "rollback": "run.rollback",
    "resolve": "effect.resolve",
    "reconcile": "reconcile",
    "bulk cancel": "bulk.cancel",
    "bulk signal": "bulk.signal",
    "bulk fork": "bulk.fork",
    "register": "definitions.register",
    "share": "definitions.share",
    "shares": "definitions.shares_read",
    "all shares": "definitions.shares_read",
    "unshare": "definitions.unshare",
    "add schedule": "schedule.change",
    "pause schedule": "schedule.change",
    "pause": "pause.change",
    "resume": "pause.change",
    "new principal": "principal.create",
    "keys": "keys.read",
    "revoke key": "key.revoke",
    "audit": "audit.read",
}
RUN_SCOPED = [name for name, (_method, path, _body, _ok) in CALLS.items() if "{run}" in path]


def call(http: httpx.Client, name: str, key: str, run_id: str) -> httpx.Response:
    method, path, body, _ok = CALLS[name]
    return http.request(method, path.format(run=run_id), json=body, headers=bearer(key))


def test_every_endpoint_answers_each_role_as_the_matrix_says(
    http: httpx.Client, deployment: Deployment, keys: dict[str, str]
) -> None:
    assert set(MATRIX) == set(CALLS)
    run_id = finished_run(http, deployment)
    wrong = []
    for name, allowed in MATRIX.items():
        for label, may in zip(PRINCIPALS, allowed, strict=True):
            got = call(http, name, keys[label], run_id).status_code
            expected = CALLS[name][3] if may else 403
            if got != expected:
                wrong.append(f"{name} by {label}: {got}, expected {expected}")
    assert not wrong, "\n".join(wrong)

    # Another namespace's run is "not found", to a principal that may do everything.
    beta = keys["beta operator+p"]
    for name in RUN_SCOPED:
        if MATRIX[name][PRINCIPALS.index("operator+p")]:
            got = call(http, name, beta, run_id).status_code
            assert got == 404, f"{name} of alpha's run by beta's operator: {got}"

    # Every privileged call is in the audit log under its principal: allowed and refused.
    entries = audit(http)
    for name, action in AUDITED.items():
        for label, may in zip(PRINCIPALS, MATRIX[name], strict=True):
            actor = f"key:{label.replace('+p', '-p')}"
            outcome = ("ok" if CALLS[name][3] < 400 else "failed") if may else "refused"
            found = [
                e
                for e in entries
                if (e["actor"], e["action"], e["outcome"]) == (actor, action, outcome)
            ]
            assert found, f"no audit entry {action} {outcome} by {actor}"
            assert found[0]["source"] and found[0]["at"] > 0
    assert all(e["namespace"] in ("alpha", "*") for e in entries)
    # Beta's calls on alpha's run are beta's entries: allowed, and failed (not found).
    theirs = audit(http, BETA_ADMIN)
    assert any(
        (e["actor"], e["action"], e["outcome"], e["status"], e["target"])
        == ("key:operator-p", "run.cancel", "failed", 404, run_id)
        for e in theirs
    ), theirs


def audit(http: httpx.Client, key: str = ALPHA_ADMIN) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    after = 0
    while True:
        page = http.get(f"/v1/audit?after={after}&limit=1000", headers=bearer(key)).json()
        entries += page["entries"]
        # Each read is audited before it answers: the log grows by one per page, so the
        # last page is a short one, not an empty one.
        if len(page["entries"]) < 1000:
            return entries
        after = page["next_after"]


def test_payloads_are_shown_only_with_the_permission(
    http: httpx.Client, deployment: Deployment, keys: dict[str, str]
) -> None:
    run_id = finished_run(http, deployment)
    for label in ("viewer", "operator", "admin"):
        run = http.get(f"/v1/runs/{run_id}", headers=bearer(keys[label])).json()
        assert run["status"] == "succeeded" and run["vars"] is None and run["result"] is None
        events = http.get(f"/v1/runs/{run_id}/events", headers=bearer(keys[label])).json()
        types = [e["type"] for e in events["events"]]
        assert "signal_received" in types and "run_started" in types
        for event in events["events"]:
            assert not {"input", "output", "payload", "state"} & set(event["data"]), event
        stream = http.get(f"/v1/runs/{run_id}/stream", headers=bearer(keys[label])).text
        assert '"ok"' not in stream and "ledger" not in stream and "event: end" in stream
    seen = http.get(f"/v1/runs/{run_id}", headers=bearer(keys["viewer+p"])).json()
    assert seen["vars"]["decisions"]["review"]["payload"] == {"ok": 1}
    events = http.get(f"/v1/runs/{run_id}/events", headers=bearer(keys["viewer+p"])).json()
    signal = next(e for e in events["events"] if e["type"] == "signal_received")
    assert signal["data"]["payload"] == {"ok": 1}


def test_the_actor_is_the_keys_principal_never_the_bodys(
    http: httpx.Client, deployment: Deployment, keys: dict[str, str]
) -> None:
    started = http.post(
        "/v1/runs",
        json={"workflow": "approval", "input": {"ledger": str(deployment.ledger)}},
        headers=bearer(keys["operator"]),
    )
    run_id = started.json()["run_id"]
    wait_for(http, run_id, "waiting")
    before = http.get(f"/v1/runs/{run_id}/events", headers=bearer(ALPHA_ADMIN)).json()["events"]
    forged = http.post(
        f"/v1/runs/{run_id}/signals/approve",
        json={"actor": "mallory-forged", "payload": {}},
        headers=bearer(keys["approver"]),
    )
    assert forged.status_code == 422, forged.text
    after = http.get(f"/v1/runs/{run_id}/events", headers=bearer(ALPHA_ADMIN)).json()["events"]
    assert after == before  # nothing written
    decided = http.post(
        f"/v1/runs/{run_id}/signals/approve",
        json={"comment": "looks right"},
        headers=bearer(keys["approver"]),
    )
    assert decided.status_code == 200, decided.text
    wait_for(http, run_id, "succeeded")
    events = http.get(f"/v1/runs/{run_id}/events", headers=bearer(ALPHA_ADMIN)).json()["events"]
    started_event = events[0]
    signal = next(e for e in events if e["type"] == "signal_received")
    assert started_event["data"]["actor"] == "key:operator"
    assert (signal["data"]["actor"], signal["data"]["comment"]) == ("key:approver", "looks right")
    admin_actor = f"key:{config_key_name(ALPHA_ADMIN)}"
    run = http.get(f"/v1/runs/{run_id}", headers=bearer(ALPHA_ADMIN)).json()
    assert run["vars"]["decisions"]["review"]["actor"] == "key:approver"
    assert admin_actor.startswith("key:config-")


def test_a_key_is_compared_exactly_and_a_key_named_twice_is_refused(
    http: httpx.Client, keys: dict[str, str]
) -> None:
    valid = keys["operator"]
    assert http.get("/v1/runs", headers=bearer(valid)).status_code == 200
    for tail in (b"\xa0", b"\x85", b" \xa0"):
        padded = {"Authorization": b"Bearer " + valid.encode() + tail}
        for method, path in (("GET", "/v1/runs"), ("POST", "/v1/runs")):
            got = http.request(method, path, json={"workflow": "approval"}, headers=padded)
            assert got.status_code == 401, (tail, path, got.text)
    for tail in (b"\xa0", b"\x85"):
        padded = {"Authorization": b"Bearer " + ALPHA_ADMIN.encode() + tail}
        assert http.get("/v1/runs", headers=padded).status_code == 401
    listed = http.get("/v1/runs?limit=500", headers=bearer(ALPHA_ADMIN)).json()["runs"]
    twice = b'{"workflow": "approval", "input": {}, "workflow": "no_such_workflow"}'
    refused = http.post(
        "/v1/runs",
        content=twice,
        headers={**bearer(valid), "Content-Type": "application/json"},
    )
    assert refused.status_code == 400, refused.text
    assert "twice" in refused.json()["error"]["message"]
    assert http.get("/v1/runs?limit=500", headers=bearer(ALPHA_ADMIN)).json()["runs"] == listed


def test_a_revoked_key_stops_working_and_a_rotated_one_after_its_grace(
    http: httpx.Client, keys: dict[str, str]
) -> None:
    admin = bearer(ALPHA_ADMIN)
    assert http.post("/v1/principals", json={"name": "ci-bot", "role": "viewer"}, headers=admin)
    minted = http.post("/v1/principals/ci-bot/keys", json={}, headers=admin).json()
    key, key_id = minted["key"], minted["key_id"]
    assert http.get("/v1/runs", headers=bearer(key)).status_code == 200
    rotated = http.post(f"/v1/keys/{key_id}/rotate", json={"grace_s": 0}, headers=admin)
    assert rotated.status_code == 201, rotated.text
    fresh = rotated.json()["key"]
    assert http.get("/v1/runs", headers=bearer(key)).status_code == 401
    assert http.get("/v1/runs", headers=bearer(fresh)).status_code == 200
    revoked = http.delete(f"/v1/keys/{rotated.json()['key_id']}", headers=admin)
    assert revoked.status_code == 204
    assert http.get("/v1/runs", headers=bearer(fresh)).status_code == 401
    listed = http.get("/v1/keys", headers=admin).json()
    mine = [k for k in listed["keys"] if k["principal"] == "ci-bot"]
    assert len(mine) == 2 and all(k["revoked_at"] for k in mine)
    assert all("key" not in k for k in mine)  # never a secret
    # Beta's admin cannot touch alpha's keys: not found in its namespace.
    assert http.delete(f"/v1/keys/{key_id}", headers=bearer(BETA_ADMIN)).status_code == 404
