"""Circuit breaking on real services: Celery workers in subprocesses, the circuit in
Redis, its waiters in PostgreSQL, and a payment service stand-in that answers 503 while
it is down and counts every request — the external side's count of attempts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster
from tests.support.dependency import DependencyServer, dependency_server

RUNS = 8


@pytest.fixture
def payments(cluster: Cluster) -> Iterator[DependencyServer]:
    with dependency_server() as server:
        cluster.env["PAYMENTS_URL"] = server.url
        yield server


def test_an_outage_opens_the_circuit_attempts_stay_flat_and_a_probe_closes_it(
    cluster: Cluster, payments: DependencyServer
) -> None:
    """Every run's call fails (503): after three runs failed in a row the circuit opens,
    and the attempts reaching the service stop growing with the retries — only a probe
    a second gets through — though every run would retry 20 times. Back up, the next
    probe closes it, the waiters are woken, and every run succeeds."""
    payments.down.set()
    cluster.consuming(cluster.worker(concurrency=4))
    cluster.scheduler()
    runs = [cluster.submit("guarded", {}) for _ in range(RUNS)]
    circuits = cluster.client.runtime.circuits
    assert circuits is not None

    def state() -> str:
        found = [c for c in circuits.reports() if c.dependency == "payments"]
        return found[0].state if found else "closed"

    cluster.wait_for(lambda: state() != "closed", 30, "the circuit to open")
    # In flight when it opened: at most the worker's four executions. Then a probe a
    # second (open_for: 1s), each failing.
    time.sleep(1.0)
    settled = payments.count()
    time.sleep(4.0)
    during = payments.count() - settled
    assert during <= 6, f"{during} attempts reached the service in 4 s of open circuit"

    def shown() -> dict[str, Any]:
        fleet = json.loads(cluster.cli("status", "--fleet", "--json").stdout)
        (circuit,) = [c for c in fleet["circuits"] if c["dependency"] == "payments"]
        return dict(circuit)

    # A probe failed and opened it again: on a loaded machine, maybe only after the 5 s.
    cluster.wait_for(lambda: shown()["opens"] >= 2, 30, "a failed probe to open it again")
    assert shown()["state"] in {"open", "half_open"}
    assert shown()["waiting"] >= RUNS - 5  # parked, holding no worker
    assert all(not cluster.client.get_run(r).status.terminal for r in runs)

    payments.down.clear()
    for run_id in runs:
        view = cluster.wait(run_id, timeout_s=30)
        assert view.status is RunStatus.SUCCEEDED, (run_id, view.reason)
    assert state() == "closed"
    told = [
        event["type"]
        for run_id in runs
        for event in cluster.client.events(run_id)
        if event["type"].startswith("audit.circuit_")
    ]
    assert told.count("audit.circuit_opened") == 1
    assert told.count("audit.circuit_closed") == 1
    assert "audit.circuit_reopened" in told  # the probes that failed
    # Each run reached the service a handful of times, not its 20 attempts.
    assert payments.count() < RUNS * 4, payments.count()


def test_a_500_is_retried_by_default_and_an_outage_of_them_opens_the_circuit(
    cluster: Cluster, payments: DependencyServer
) -> None:
    """A handler's own HTTP call (requests, ``raise_for_status``) answered 500: nothing
    but the status says what it is, and a server's 500 is transient — the default retry
    runs it again (500 twice, then 200: it succeeds at attempt 3), and an outage of 500s
    opens the dependency's circuit, which a probe closes once the service is back."""
    payments.status = 500
    payments.fail_next = 2
    cluster.consuming(cluster.worker(concurrency=2))
    cluster.scheduler()
    first = cluster.submit("service_call", {})
    view = cluster.wait(first, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["attempt"] == 3
    assert payments.count() == 3

    payments.down.set()
    runs = [cluster.submit("service_call", {}) for _ in range(4)]
    circuits = cluster.client.runtime.circuits
    assert circuits is not None
    cluster.wait_for(
        lambda: any(c.dependency == "service" and c.state != "closed" for c in circuits.reports()),
        30,
        "the circuit to open on 500s",
    )
    payments.down.clear()
    cluster.all_succeeded(runs, 30)
