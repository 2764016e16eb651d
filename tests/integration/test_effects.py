"""Exactly-once side effects on real PostgreSQL, Redis, Celery workers and a real HTTP
service that honours Idempotency-Key and misbehaves on request: the effects ledger,
crashes around the external call, `cairn reconcile`, and the acceptance test — many
runs, every message delivered twice, workers killed at random — after which the
service's state equals a single clean execution."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import update

from cairn import NotApplied, StaleClaim
from cairn.effects import EffectLedger
from cairn.model.statuses import RunStatus
from cairn.store.schema import executions
from tests.support.cluster import Cluster
from tests.support.services import PG_ADMIN
from tests.support.shop import Service, effects_of, reconcile


def doomed_worker(cluster: Cluster, fault_point: str) -> subprocess.Popen[bytes]:
    """A worker that kills itself at ``fault_point`` (threads: the whole process dies)."""
    return cluster.spawn(
        "worker",
        "--concurrency=1",
        "--pool=threads",
        env={"CAIRN_FAULT_POINTS": fault_point},
    )


def test_an_effect_is_recorded_and_never_called_again(shop: Cluster, service: Service) -> None:
    """The node runs twice (its worker is killed after the handler returned, before the
    commit); the second run gets the recorded results back without calling."""
    doomed = doomed_worker(shop, "handler.after_return")
    shop.scheduler()
    run_id = shop.submit("order", {"order": "o-1"})
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    shop.worker()
    view = shop.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, shop.log_tails()
    stats = service.stats()
    assert stats["requested"] == {"o-1:charge": 1, "o-1:receipt": 1}, (
        effects_of(shop, run_id),
        shop.log_tails(),
    )
    assert stats["applied"] == {"o-1:charge": 1, "o-1:receipt": 1}
    effects = effects_of(shop, run_id)
    assert {key: (e.status, e.calls) for key, e in effects.items()} == {
        "o-1:charge": ("applied", 1),
        "o-1:receipt": ("applied", 1),
    }
    assert view.state is not None
    assert view.state.vars["charge_id"] == effects["o-1:charge"].result["id"]


@pytest.mark.parametrize(
    ("fault", "adapters"), [("drop", True), ("error", True), ("drop", False), ("error", False)]
)
def test_a_call_that_applied_but_did_not_say_so_is_resolved_before_any_new_call(
    shop: Cluster, service: Service, fault: str, adapters: bool
) -> None:
    """The service applies the charge, then drops the connection (or answers 500): the
    ledger records the outcome unknown, never failed. The node retries: with an adapter
    it asks the service first, which has the charge — backfilled, not called again;
    without one it calls again with the same key, and the service replays its answer."""
    if not adapters:
        del shop.env["CAIRN_EFFECT_ADAPTERS"]
    shop.worker()
    shop.scheduler()
    service.fault(fault, times=1)
    order = f"o-{fault}-{adapters}"
    run_id = shop.submit("order", {"order": order})
    assert shop.wait(run_id).status is RunStatus.SUCCEEDED, shop.log_tails()
    stats = service.stats()
    assert stats["applied"][f"{order}:charge"] == 1
    assert stats["requested"][f"{order}:charge"] == (1 if adapters else 2)
    charge = effects_of(shop, run_id)[f"{order}:charge"]
    assert (charge.status, charge.calls) == ("applied", 1 if adapters else 2)
    assert charge.result["key"] == f"{order}:charge"


@pytest.mark.parametrize("adapters", [True, False])
def test_a_lost_response_with_no_retry_left_is_unknown_and_reconcile_resolves_it(
    shop: Cluster, service: Service, tmp_path: Path, adapters: bool
) -> None:
    """The charge is applied, its response dropped, and the node has no attempt left:
    the run fails. The ledger says unknown (a failed run hiding a charge is what this
    prevents); `cairn reconcile` finds the charge at the service, records it and flags
    it — money moved for a run that did not succeed — or, with no adapter to ask, flags
    it; the drift report and its metrics show it. The service applied it once."""
    if not adapters:
        del shop.env["CAIRN_EFFECT_ADAPTERS"]
    shop.worker()
    service.fault("drop", times=1)
    run_id = shop.submit("order_once", {"order": "o-lost"})
    assert shop.wait(run_id).status is RunStatus.FAILED, shop.log_tails()
    charge = effects_of(shop, run_id)["o-lost:charge"]
    assert (charge.status, charge.error_class, charge.calls) == ("unknown", "transient", 1)
    assert service.stats()["applied"] == {"o-lost:charge": 1}

    metrics = tmp_path / "reconcile.prom"
    code, drift = reconcile(shop, tmp_path, "--grace", "0.001", "--metrics-file", str(metrics))
    assert code == 1, drift  # something for a person
    reason = "applied_for_unsuccessful_run" if adapters else "no_adapter"
    (entry,) = drift["needs_human"]
    assert (entry["key"], entry["reason"], entry["ledger"]) == ("o-lost:charge", reason, "unknown")
    assert entry["run_id"] == run_id and entry["run_status"] == "failed"
    (seen,) = drift["unknown"]
    assert (seen["key"], seen["outcome"]) == ("o-lost:charge", f"flagged: {reason}")
    text = metrics.read_text()
    assert "cairn_reconcile_unknown 1.0" in text
    assert f'cairn_reconcile_drift{{reason="{reason}"}} 1.0' in text
    charge = effects_of(shop, run_id)["o-lost:charge"]
    assert charge.status == "flagged"
    if adapters:  # recorded as the service has it
        record = service.call("GET", "/charges/o-lost:charge")
        assert charge.result == record and charge.applied_at is not None
    code, again = reconcile(shop, tmp_path, "--grace", "0.001")  # settled: a person's now
    assert code == 0 and again["unknown"] == [] and again["needs_human"] == []
    stats = service.stats()
    assert stats["applied"] == {"o-lost:charge": 1} and stats["requested"] == {"o-lost:charge": 1}


def test_the_workers_database_connections_dropped_mid_effect_are_ridden_out(
    shop: Cluster, service: Service
) -> None:
    """PostgreSQL drops every connection of the worker (pg_terminate_backend) while its
    handler is inside ctx.effect, the call in flight — and refuses new ones until after
    the call has returned: recording the outcome waits for the database and reconnects
    (it is not the handler's failure); the run succeeds, the service applied it once."""
    name = f"cairn-effects-worker-{os.getpid()}"
    url = shop.env["CAIRN_DATABASE_URL"]
    database = url.rpartition("/")[2]
    separator = "&" if "?" in url else "?"
    worker = shop.worker(
        concurrency=1, CAIRN_DATABASE_URL=f"{url}{separator}application_name={name}"
    )
    shop.scheduler()
    shop.consuming(worker)
    delay_s = 2.0
    service.fault("slow", times=1, delay_s=delay_s)
    run_id = shop.submit("order", {"order": "o-pg"})
    shop.wait_for(lambda: service.stats()["requested"].get("o-pg:charge") == 1, 30, "the slow call")
    called_at = time.monotonic()
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
        try:
            terminated = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            ).fetchone()
            # The call returns, and finds the database away for a while.
            time.sleep(max(0.0, called_at + delay_s + 1.5 - time.monotonic()))
        finally:
            admin.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
    assert terminated is not None and terminated[0] >= 1  # the worker's pooled connections
    view = shop.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, shop.log_tails()
    stats = service.stats()
    assert stats["applied"]["o-pg:charge"] == 1 and stats["requested"]["o-pg:charge"] == 1
    charge = effects_of(shop, run_id)["o-pg:charge"]
    assert (charge.status, charge.calls) == ("applied", 1)
    log = worker.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    assert "effect 'o-pg:charge': recording its outcome: the database unreachable" in log, (
        shop.log_tails()
    )


def _take_over(cluster: Cluster, run_id: str, node: str, fence: int) -> None:
    """What a newer claim of the node leaves in PostgreSQL: its fence."""
    with cluster.client.runtime.store.transaction() as tx:
        tx.connection.execute(
            update(executions)
            .where(executions.c.run_id == run_id, executions.c.node == node)
            .values(fence=fence)
        )


def test_an_effect_is_refused_to_a_claim_postgresql_has_seen_taken_over(
    shop: Cluster, service: Service
) -> None:
    """On PostgreSQL, in the statement that records it: an execution whose recorded
    fence is above the ledger's refuses the intent (and the re-claim of a known key);
    the service sees no request; a claim at the recorded fence may call."""
    run_id = shop.submit("order", {"order": "o-stale"})  # dispatched; no worker takes it
    store = shop.client.runtime.store

    def ledger(fence: int) -> EffectLedger:
        return EffectLedger(store, "default", run_id, "charge", 1, 1, fence, 100_000)

    def posted(key: str) -> Any:
        body = json.dumps({"order": "o-stale"}).encode()
        request = urllib.request.Request(
            service.url + "/charges", data=body, method="POST", headers={"Idempotency-Key": key}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    _take_over(shop, run_id, "charge", 5)
    with pytest.raises(StaleClaim, match="no effect made"):
        ledger(3).effect("payments.charge", "o-stale:charge", posted)
    assert effects_of(shop, run_id) == {}
    assert service.stats()["requested"] == {}

    def declined(key: str) -> Any:
        raise NotApplied("declined before sending")

    with pytest.raises(NotApplied):  # the claim at fence 5 tries, and it is not taken
        ledger(5).effect("payments.charge", "o-stale:charge", declined)
    before = effects_of(shop, run_id)["o-stale:charge"]
    _take_over(shop, run_id, "charge", 7)
    with pytest.raises(StaleClaim):
        ledger(6).effect("payments.charge", "o-stale:charge", posted)
    assert effects_of(shop, run_id)["o-stale:charge"] == before
    assert service.stats()["requested"] == {}
    result = ledger(7).effect("payments.charge", "o-stale:charge", posted)
    assert result["key"] == "o-stale:charge"
    assert service.stats()["requested"] == {"o-stale:charge": 1}


def test_a_worker_whose_node_was_taken_over_before_its_effect_makes_no_call(
    shop: Cluster, service: Service, tmp_path: Path
) -> None:
    """A worker runs the charge; before it calls, PostgreSQL records a newer claim of the
    node (as a takeover does). Its ctx.effect is refused in the intent's statement: no
    request reaches the service, its result is not committed (a stale write). Recovered,
    the node runs under a new claim and charges once."""
    gate = tmp_path / "gate"
    worker = shop.worker(concurrency=1)
    shop.consuming(worker)
    run_id = shop.submit("order_gated", {"order": "o-gate", "gate": str(gate)})
    waiting = gate.with_name("gate.waiting")
    shop.wait_for(waiting.exists, 30, "the handler at its gate")
    _take_over(shop, run_id, "charge", 10)
    gate.touch()

    def stale() -> list[dict[str, Any]]:
        events = shop.client.events(run_id)
        return [e for e in events if e["type"] == "audit.stale_write_rejected"]

    shop.wait_for(lambda: bool(stale()), 30, "the stale write's refusal")
    assert stale()[0]["data"]["caught_by"] == "fence"
    assert service.stats()["requested"] == {}  # the stale holder never called
    assert effects_of(shop, run_id) == {}
    log = worker.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    assert "StaleClaim" in log, shop.log_tails()
    shop.scheduler()  # recovery: the node runs again, under a claim above fence 10
    assert shop.wait(run_id, timeout_s=60).status is RunStatus.SUCCEEDED, shop.log_tails()
    stats = service.stats()
    assert stats["applied"] == {"o-gate:charge": 1} and stats["requested"] == {"o-gate:charge": 1}
    with shop.client.runtime.store.reading() as tx:
        (charge,) = tx.effects_of(run_id)
    assert (charge.status, charge.calls) == ("applied", 1) and charge.fence > 10


def test_a_crash_between_the_call_and_the_ledger_is_repaired_by_reconcile(
    shop: Cluster, service: Service, tmp_path: Path
) -> None:
    """effect.after_call: the charge is applied at the service, the worker dies before
    the ledger hears of it. `cairn reconcile` finds it there and backfills the ledger;
    the node, recovered, gets the recorded result: the service is called once."""
    doomed = doomed_worker(shop, "effect.after_call")
    run_id = shop.submit("order", {"order": "o-crash"})
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    assert effects_of(shop, run_id)["o-crash:charge"].status == "intent"
    code, drift = reconcile(shop, tmp_path, "--grace", "0.001")
    assert code == 0, drift
    assert [(e["key"], e["action"]) for e in drift["fixed"]] == [("o-crash:charge", "backfilled")]
    assert drift["needs_human"] == []
    charge = effects_of(shop, run_id)["o-crash:charge"]
    assert charge.status == "applied" and charge.result["key"] == "o-crash:charge"
    shop.worker()
    shop.scheduler()
    assert shop.wait(run_id).status is RunStatus.SUCCEEDED, shop.log_tails()
    assert service.stats()["requested"]["o-crash:charge"] == 1
    assert effects_of(shop, run_id)["o-crash:charge"].calls == 1


def test_a_worker_resolves_a_left_intent_through_the_adapter_before_calling(
    shop: Cluster, service: Service
) -> None:
    """The same crash, no reconciler: the recovered node asks the service first."""
    doomed = doomed_worker(shop, "effect.after_call")
    run_id = shop.submit("order", {"order": "o-self"})
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    shop.worker()
    shop.scheduler()
    assert shop.wait(run_id).status is RunStatus.SUCCEEDED, shop.log_tails()
    assert service.stats()["requested"]["o-self:charge"] == 1
    charge = effects_of(shop, run_id)["o-self:charge"]
    assert (charge.status, charge.calls) == ("applied", 1)


def test_reconcile_reports_a_business_discrepancy_for_a_person(
    shop: Cluster, service: Service, tmp_path: Path
) -> None:
    shop.worker()
    shop.scheduler()
    runs = {order: shop.submit("order", {"order": order}) for order in ("o-a", "o-b")}
    for run_id in runs.values():
        assert shop.wait(run_id).status is RunStatus.SUCCEEDED, shop.log_tails()
    service.call("DELETE", "/charges/o-b:charge")  # refunded by hand, outside cairn
    metrics = tmp_path / "reconcile.prom"
    code, drift = reconcile(shop, tmp_path, "--metrics-file", str(metrics))
    assert code == 1  # something needs a person
    assert drift["checked"] == 4 and drift["consistent"] == 3 and drift["fixed"] == []
    (entry,) = drift["needs_human"]
    assert entry["key"] == "o-b:charge" and entry["reason"] == "missing_externally"
    assert entry["run_id"] == runs["o-b"] and entry["ledger"] == "applied"
    assert 'cairn_reconcile_drift{reason="missing_externally"} 1.0' in metrics.read_text()
    assert effects_of(shop, runs["o-b"])["o-b:charge"].status == "flagged"
    # A second pass finds nothing new: what it saw is settled.
    code, again = reconcile(shop, tmp_path)
    assert code == 0 and again["checked"] == 0


def test_reapply_policy_restores_what_went_missing(
    shop: Cluster, service: Service, tmp_path: Path
) -> None:
    shop.worker()
    shop.scheduler()
    run_id = shop.submit("order", {"order": "o-r", "policy": "reapply"})
    assert shop.wait(run_id).status is RunStatus.SUCCEEDED, shop.log_tails()
    service.call("DELETE", "/charges/o-r:charge")  # lost by the payment provider
    code, drift = reconcile(shop, tmp_path)
    assert code == 0
    assert [(e["key"], e["action"]) for e in drift["fixed"]] == [("o-r:charge", "reapplied")]
    assert service.call("GET", "/charges/o-r:charge")["reapplied"] is True


def test_two_reconcilers_at_once_repair_each_effect_once(
    shop: Cluster, service: Service, tmp_path: Path
) -> None:
    """Twenty charges applied at the service whose ledger entries a crash left in intent
    (the effect.after_call window, reproduced directly); two passes at once."""
    doomed = doomed_worker(shop, "effect.after_call")
    first = shop.submit("order", {"order": "o-0"})
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    template = effects_of(shop, first)["o-0:charge"]
    with shop.client.runtime.store.transaction() as tx:
        for n in range(1, 20):
            key = f"o-{n}:charge"
            service.call("POST", "/faults", {"mode": None})
            request = urllib.request.Request(
                service.url + "/charges",
                data=json.dumps({"order": f"o-{n}"}).encode(),
                method="POST",
                headers={"Idempotency-Key": key},
            )
            urllib.request.urlopen(request, timeout=10).close()
            tx.record_intent(
                {
                    **{
                        name: getattr(template, name)
                        for name in ("namespace", "name", "run_id", "node", "iteration")
                    },
                    "key": key,
                    "attempt": 1,
                    "status": "intent",
                    "calls": 1,
                    "created_at": template.created_at,
                    "updated_at": template.created_at,
                },
                phase=None,  # seeded by hand: no claim to fence against
            )
    reports = [tmp_path / "a.json", tmp_path / "b.json"]
    passes = [
        shop.spawn("reconcile", "--grace", "0.001", "--report", str(report)) for report in reports
    ]
    assert [p.wait(timeout=60) for p in passes] == [0, 0]
    fixed = [
        entry["key"] for report in reports for entry in json.loads(report.read_text())["fixed"]
    ]
    assert sorted(fixed) == sorted(f"o-{n}:charge" for n in range(20))  # each once


def test_many_runs_every_message_twice_and_workers_killed_equal_one_clean_execution(
    shop: Cluster, service: Service
) -> None:
    """The acceptance test: 200 orders, each submitted three times (request ids), every
    node message delivered twice, workers killed at random while they run. Every order
    is charged and mailed exactly once at the service."""
    shop.env["CAIRN_DUPLICATE_DELIVERIES"] = "true"  # workers and scheduler publish twice
    shop.settings = shop.settings.model_copy(update={"duplicate_deliveries": True})  # and we
    workers = [shop.worker(concurrency=2) for _ in range(2)]
    shop.scheduler()
    rng = random.Random(7)
    orders = [f"acc-{n}" for n in range(200)]
    run_ids: dict[str, str] = {}
    kills = 0
    for index, order in enumerate(orders):
        ids = {shop.submit("order", {"order": order}, request_id=order) for _ in range(3)}
        assert len(ids) == 1  # the request layer: one run per request id
        run_ids[order] = ids.pop()
        if index % 25 == 12:  # a worker dies mid-flight, another takes its place
            victim = workers.pop(rng.randrange(len(workers)))
            shop.kill(victim)
            kills += 1
            workers.append(shop.worker(concurrency=2))
    deadline = time.monotonic() + 240
    for order, run_id in run_ids.items():
        view = shop.wait(run_id, timeout_s=max(1.0, deadline - time.monotonic()))
        assert view.status is RunStatus.SUCCEEDED, (order, shop.log_tails())
    stats = service.stats()
    expected = {f"{order}:{what}" for order in orders for what in ("charge", "receipt")}
    assert set(stats["applied"]) == expected
    assert set(stats["applied"].values()) == {1}  # each effect applied exactly once
    assert stats["records"] == len(expected)
    assert kills == 8


def test_a_worker_paused_mid_call_is_replaced_without_a_second_call(
    shop: Cluster, service: Service
) -> None:
    """A slow call; its worker is stopped (SIGSTOP) while the call is in flight, past its
    lease. The worker that takes the node over finds the intent, asks the service — it
    has the charge — and backfills; the paused worker, resumed, records nothing."""
    service.fault("slow", times=1, delay_s=1.0)
    paused = shop.worker(concurrency=1)
    shop.scheduler()
    run_id = shop.submit("order", {"order": "o-slow"})
    shop.wait_for(
        lambda: service.stats()["requested"].get("o-slow:charge") == 1, 30, "the slow call"
    )
    shop.signal(paused, signal.SIGSTOP)
    shop.worker(concurrency=1)
    view = shop.wait(run_id, timeout_s=60)
    shop.signal(paused, signal.SIGCONT)
    assert view.status is RunStatus.SUCCEEDED, shop.log_tails()
    stats = service.stats()
    assert stats["applied"]["o-slow:charge"] == 1 and stats["requested"]["o-slow:charge"] == 1
    charge = effects_of(shop, run_id)["o-slow:charge"]
    assert (charge.status, charge.calls) == ("applied", 1)


def test_a_worker_stopped_past_its_lease_makes_no_call_when_resumed(
    shop: Cluster, service: Service
) -> None:
    """The worker running the charge is SIGSTOPped in the pause before its call; its lease
    lapses, another worker takes the node over (fence 2, recorded in PostgreSQL) and
    pauses too; the stopped one is resumed then, past its own lease deadline, and goes
    straight for the call. It must learn it is stale before calling: the service sees
    one request only, the new holder's, carrying fence 2."""
    first = shop.worker(concurrency=1)
    shop.consuming(first)
    shop.scheduler()
    run_id = shop.submit("order_paused", {"order": "o-stop", "first_pause_s": 3, "pause_s": 4})
    shop.wait_for(lambda: shop.executions()[(run_id, "charge", 1)] == 1, 30, "the charge")
    shop.signal(first, signal.SIGSTOP)
    stopped_at = time.monotonic()
    second = shop.worker(concurrency=1)
    shop.consuming(second)
    shop.wait_for(lambda: shop.executions()[(run_id, "charge", 1)] == 2, 30, "a takeover")
    time.sleep(max(0.0, stopped_at + 3.5 - time.monotonic()))  # the first's pause is over
    shop.signal(first, signal.SIGCONT)
    view = shop.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    stats = service.stats()
    assert stats["requested"] == {"o-stop:charge": 1}, stats
    assert stats["fences"] == {"o-stop:charge": ["2"]}, stats
    stale = [e for e in shop.client.events(run_id) if e["type"] == "audit.stale_write_rejected"]
    assert [(e["data"]["fence"], e["data"]["caught_by"]) for e in stale] == [(1, "lease")]
