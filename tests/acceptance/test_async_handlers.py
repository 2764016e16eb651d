"""Async handlers on real services (PostgreSQL, Redis, Celery workers in subprocesses):
``async def`` handlers and compensations beside synchronous ones, an awaited effect applied
once, and an await that never returns stopped where it waits — by the node's timeout
(and the retry runs) or by the run's cancel — with the handler's cleanup run and its
connection closed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster
from tests.support.shop import Service, effects_of, reconcile
from tests.support.silent import Silent, silent_server


@pytest.fixture
def silent() -> Iterator[Silent]:
    with silent_server() as server:
        yield server


def _lines(cluster: Cluster, run_id: str) -> list[tuple[str, int, str]]:
    """(node, attempt, what) of the run, in the handlers' own ledger."""
    found = []
    if not cluster.ledger.exists():
        return found
    for line in cluster.ledger.read_text().splitlines():
        run, node, _iteration, attempt, what, _pid = line.split()
        if run == run_id:
            found.append((node, int(attempt), what))
    return found


def test_an_async_handler_hung_at_an_await_is_cancelled_there_at_its_timeout(
    cluster: Cluster, silent: Silent
) -> None:
    """``await client.get(...)`` on a server that never answers, no client timeout,
    ``timeout: 4s``: the coroutine is cancelled at that await (its cleanup records it),
    its connection closed, and attempt 2 runs — on the one worker slot, whose process
    need not be replaced."""
    worker = cluster.worker(concurrency=1, CAIRN_TIMEOUT_GRACE="2")
    cluster.consuming(worker)
    cluster.scheduler()
    started = time.monotonic()
    run_id = cluster.submit("async_deadline", {"silent_url": silent.url})
    view = cluster.wait(run_id, timeout_s=60)
    elapsed = time.monotonic() - started
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["answered_on_attempt"] == 2
    assert _lines(cluster, run_id) == [
        ("ask", 1, "start"),
        ("ask", 1, "cancelled"),
        ("ask", 2, "start"),
        ("ask", 2, "done"),
    ]
    assert elapsed < 4 + 2 + cluster.settings.lease_ttl + 5, elapsed
    assert silent.accepted == 1
    cluster.wait_for(lambda: silent.open_now == 0, 5, "the cancelled call's connection closed")
    log = worker.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    assert "ending worker process" not in log  # cancelled, not killed
    print(f"\nasync handler hung at an await: succeeded on attempt 2 after {elapsed:.1f} s")


def test_sync_and_async_handlers_run_side_by_side_and_an_awaited_effect_applies_once(
    shop: Cluster, service: Service
) -> None:
    shop.worker(concurrency=4)
    shop.scheduler()
    shipped = shop.submit("async_mix", {"order": "o-1"})
    refused = shop.submit("async_mix", {"order": "o-2", "shipping": "refused"})
    view = shop.wait(shipped)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["charge_id"]
    assert [m["content"] for m in view.state.messages if m["role"] == "assistant"] == [
        "turn 0",
        "turn 1",
        "turn 2",
    ]
    rolled_back = shop.wait(refused)
    assert rolled_back.status is RunStatus.COMPENSATED, rolled_back.reason
    undone = [(node, what) for node, _attempt, what in _lines(shop, refused) if what == "undo"]
    assert undone == [("charge", "undo"), ("think", "undo")]  # async compensations, last first
    stats = service.stats()
    assert stats["applied"] == {"o-1:charge": 1, "o-2:charge": 1}
    assert stats["requested"] == {"o-1:charge": 1, "o-2:charge": 1}


def test_a_cancel_stops_an_async_handler_at_its_await_and_keeps_its_partial_output(
    cluster: Cluster, silent: Silent
) -> None:
    """The default heartbeat interval (10 s): the cancel is announced to the worker
    holding the node's lease as it commits, so the stream is closed within a second."""
    slow_beats = {"CAIRN_HEARTBEAT_INTERVAL": "10", "CAIRN_LEASE_TTL": "30"}
    worker = cluster.spawn("worker", "--concurrency=2", "--pool=threads", env=slow_beats)
    cluster.consuming(worker)
    cluster.scheduler()
    run_id = cluster.submit("async_listen", {"silent_url": silent.url})
    cluster.wait_for(lambda: silent.open_now == 1, 30, "the handler's stream open")
    asked = time.monotonic()
    assert cluster.client.cancel(run_id, "the user closed the tab")
    cluster.wait_for(lambda: silent.open_now == 0, 10, "the stream closed")
    closed_after = time.monotonic() - asked
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.CANCELLED, view.reason
    assert _lines(cluster, run_id) == [("listen", 1, "start"), ("listen", 1, "cancelled")]
    # What it had when stopped is kept, readable: in the state and in its execution.
    assert view.state is not None and view.state.vars["partial"] == "what the stream had said"
    with cluster.client.runtime.store.reading() as tx:
        (execution,) = tx.executions_of(run_id)
    assert execution.result == {"partial": "what the stream had said"}
    assert closed_after < 1.0, closed_after  # not the 10 s of a heartbeat
    print(f"\ncancel -> stream closed after {closed_after:.2f} s (heartbeats every 10 s)")


def _charge_out(service: Service, key: str) -> bool:
    return service.stats()["requested"].get(key, 0) == 1


def test_a_cancel_waits_for_an_awaited_charge_still_out_and_records_it(
    shop: Cluster, service: Service
) -> None:
    """The charge takes 3 s at the service; the run is cancelled 1 s in. The call is not
    cut short: it is awaited to its end and recorded applied, then the node stops and
    the run ends cancelled."""
    shop.worker(concurrency=2)
    shop.scheduler()
    service.fault("slow", delay_s=3)
    run_id = shop.submit("async_pay", {"order": "p-1"})
    shop.wait_for(lambda: _charge_out(service, "p-1:charge"), 30, "the charge on its way")
    assert shop.client.cancel(run_id, "changed my mind")
    assert shop.wait(run_id).status is RunStatus.CANCELLED
    charge = effects_of(shop, run_id)["p-1:charge"]
    assert (charge.status, charge.calls) == ("applied", 1)
    assert service.stats()["applied"] == {"p-1:charge": 1}
    assert ("charge", 1, "charged") not in _lines(shop, run_id)  # the node did not go on


def test_a_charge_still_out_at_the_cancel_timeout_is_detached_and_reconciled(
    shop: Cluster, service: Service, tmp_path: Path
) -> None:
    """cancel_timeout 1 s, the charge takes 5 s: the node is detached and its effect
    recorded unknown; once the service has applied it, ``cairn reconcile`` asks the
    adapter, records it as the service has it, and — money moved for a cancelled run —
    flags it for a person. One call, never a second."""
    shop.worker(concurrency=2)
    shop.scheduler()
    service.fault("slow", delay_s=5)
    run_id = shop.submit("async_pay_hasty", {"order": "p-2"})
    shop.wait_for(lambda: _charge_out(service, "p-2:charge"), 30, "the charge on its way")
    assert shop.client.cancel(run_id, "changed my mind")
    assert shop.wait(run_id).status is RunStatus.CANCELLED
    shop.wait_for(
        lambda: effects_of(shop, run_id)["p-2:charge"].status == "unknown", 10, "detached"
    )
    shop.wait_for(lambda: service.stats()["applied"] == {"p-2:charge": 1}, 15, "applied")
    code, drift = reconcile(shop, tmp_path, "--grace", "0.001")
    assert code == 1, drift  # for a person
    (entry,) = drift["needs_human"]
    assert (entry["key"], entry["reason"]) == ("p-2:charge", "applied_for_unsuccessful_run")
    assert entry["run_status"] == "cancelled"
    charge = effects_of(shop, run_id)["p-2:charge"]
    assert charge.status == "flagged" and charge.calls == 1
    assert charge.result == service.call("GET", "/charges/p-2:charge")  # as the service has it
    assert service.stats()["requested"] == {"p-2:charge": 1}
