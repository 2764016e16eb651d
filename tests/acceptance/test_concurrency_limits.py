"""Keyed concurrency limits on real services: Celery workers in subprocesses, slots in
Redis, waiters in PostgreSQL, and the model stand-in as a provider that refuses (429)
whatever is past its own concurrency limit — its count is the proof. A worker killed -9
while it holds slots does not leak them: they come back with its leases."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from cairn.observe.limits import pool_reports
from cairn.testing.model_server import ModelServer, Reply, Request
from tests.support.cluster import Cluster, lost_a_claim

LIMIT = 4


@pytest.fixture
def provider(cluster: Cluster) -> Iterator[ModelServer]:
    with ModelServer(limit_in_flight=LIMIT) as server:
        cluster.env["MODEL_URL"] = server.url
        yield server


def test_a_pool_never_has_more_calls_at_the_provider_than_its_limit(
    cluster: Cluster, provider: ModelServer
) -> None:
    """Two workers of four slots each (eight at once) and a limit of four: the
    provider never sees a fifth call (it would refuse it), yet sees four at a time."""
    # Calls of a second and a half, the runs submitted in one batch once the workers
    # are up: four calls overlap even on a loaded machine (one submit at a time spread
    # over a second under load and left only three at a time; submitting before the
    # workers started put the calls beside their start-up, which starved the 2 s leases).
    provider.script(*(Reply(text="ok", delay_s=1.5) for _ in range(12)))
    cluster.consuming(cluster.worker(concurrency=4))
    cluster.consuming(cluster.worker(concurrency=4))
    cluster.scheduler()
    item = {"workflow": "limited_calls", "input": {"ledger": str(cluster.ledger), "tenant": "acme"}}
    runs = [str(answer.run_id) for answer in cluster.client.submit_batch([item] * 12)]
    cluster.all_succeeded(runs, 90)
    lost = _lost_claims(cluster, runs)
    # No call past the limit reached the provider — but for a holder whose lease lapsed
    # (a 2 s lease, on a starved machine): its slot went with the lease while its call
    # was still out (docs/flow-control.md), at most one call each.
    if provider.over_limit > sum(lost.values()):
        pytest.fail(f"{provider.over_limit} calls past the limit; claims lost: {lost}")
    assert provider.peak_in_flight == LIMIT  # and the limit was used
    _one_request_per_run(cluster, provider, runs, lost)  # a parked run is not retried
    with cluster.client.runtime.store.reading() as tx:
        assert tx.waiting_pools() == []


def _lost_claims(cluster: Cluster, runs: list[str]) -> Counter[str]:
    """The claims each run's history says it lost."""
    return Counter(
        {run: sum(1 for e in cluster.client.events(run) if lost_a_claim(e)) for run in runs}
    )


def _one_request_per_run(
    cluster: Cluster, provider: ModelServer, runs: list[str], lost: Counter[str]
) -> None:
    """Each run had its call answered once — or once more for each claim its history
    says it lost (only a call in flight when its claim was lost is sent again,
    cairn.recording.calls): a parked run is never retried. A call the provider refused
    (past its limit, beside a lapsed lease: counted above) is retried, as a 429 is."""

    def run_of(request: Request) -> str:
        return str(request.body["messages"][0]["content"]).removeprefix("run ")

    assert {run_of(request) for request in provider.requests} == set(runs)
    sent = Counter(run_of(request) for request in provider.requests if not request.refused)
    for run in runs:
        if not 1 <= sent[run] <= 1 + lost[run]:
            story = [(e["type"], e["data"]) for e in cluster.client.events(run)]
            pytest.fail(f"{run} sent {sent[run]}: {story}\n{cluster.log_lines(run)}")


def test_a_worker_killed_holding_slots_does_not_leak_them(
    cluster: Cluster, provider: ModelServer
) -> None:
    """A worker holding every slot of the pool is killed -9 mid-call: its slots are free
    once its leases expire (one lease TTL, 2 s here), the waiters run on the other
    worker, and every run ends."""
    # Calls that would outlast the test: only the kill ends them (the provider sees its
    # client go away, as a real one does, and stops counting them against its limit).
    provider.script(*(Reply(text="slow", delay_s=300) for _ in range(LIMIT)))
    first = cluster.worker(concurrency=LIMIT)
    cluster.consuming(first)
    cluster.scheduler()
    runs = [cluster.submit("limited_calls", {"tenant": "acme"}) for _ in range(12)]
    cluster.wait_for(lambda: provider.count() >= LIMIT, 30, "the first calls")
    cluster.consuming(cluster.worker(concurrency=LIMIT))  # its executions park: no slot
    assert provider.count() == LIMIT

    runtime = cluster.client.runtime
    assert runtime.slots is not None
    slots = runtime.slots

    def pool() -> dict[str, object]:
        found = [p.to_dict() for p in pool_reports(runtime.store, slots)]
        return next((p for p in found if p["pool"] == "default/state.tenant=acme"), {})

    cluster.wait_for(lambda: pool().get("waiting") == 12 - LIMIT, 30, "the rest parked")
    shown = json.loads(cluster.cli("status", "--fleet", "--json").stdout)["concurrency"]
    (acme,) = [p for p in shown if p["pool"] == "default/state.tenant=acme"]
    assert (acme["running"], acme["limit"], acme["waiting"]) == (LIMIT, LIMIT, 12 - LIMIT)
    cluster.kill(first)  # it holds all four slots, each call still out
    killed_at = time.monotonic()

    def slot_back() -> bool:  # a dead holder no longer counted, or a waiter let in
        found = pool()
        return bool(found.get("running", 0) < LIMIT or found.get("waiting", 0) < 12 - LIMIT)

    cluster.wait_for(slot_back, 30, "a slot after the kill")
    freed_after = time.monotonic() - killed_at
    cluster.all_succeeded(runs, 90)
    assert provider.count() == 12 + LIMIT and provider.over_limit == 0
    # The dead worker's slots came back with its leases (TTL 2 s), not later. (Timed to
    # the pool, not to the next call at the provider: a fresh worker process imports the
    # SDK before its first call, which on a loaded machine takes seconds of its own.)
    assert freed_after < 2 * float(cluster.env["CAIRN_LEASE_TTL"]) + 2, freed_after
