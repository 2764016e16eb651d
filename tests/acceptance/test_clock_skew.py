"""Workers whose clocks are five minutes off, on real services: one fast, one slow, and
every message delivered twice so that each tries to claim what the other holds. No
liveness decision may depend on a worker's wall clock: the fast one must not steal a live
lease, the slow one must not lose its own, and no timer they arm may fire early or late.

The skew is injected through the worker's clock (``CAIRN_CLOCK_SKEW_S``, read by
:mod:`cairn.clock`, through which every wall-clock read in cairn goes): libfaketime
would also freeze the timed waits of these processes.
"""

from __future__ import annotations

import time
from pathlib import Path

from cairn import clock
from cairn.client import Client
from cairn.config import Settings
from cairn.effects.ledger import EffectLedger
from cairn.model.effects import Policy
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.records import to_epoch
from tests.support.cluster import WORKFLOWS, Cluster, lost_a_claim

RUNS = 6
SKEW_S = 300.0


def test_workers_five_minutes_fast_and_slow_neither_steal_nor_lose_a_lease(
    cluster: Cluster,
) -> None:
    twice = {"CAIRN_DUPLICATE_DELIVERIES": "1"}
    fast = cluster.worker(concurrency=2, CAIRN_CLOCK_SKEW_S=str(SKEW_S), **twice)
    slow = cluster.worker(concurrency=2, CAIRN_CLOCK_SKEW_S=str(-SKEW_S), **twice)
    for worker in (fast, slow):
        cluster.consuming(worker)
    cluster.scheduler(CAIRN_CLOCK_SKEW_S=str(-SKEW_S), **twice)
    # b outlives several lease periods (TTL 2 s), renewed by whichever worker holds it.
    slow_b = {"b": 3 * cluster.settings.lease_ttl}
    # The nodes' messages come from this process (a's from the submit, b's from the
    # signal), each published twice too: the relay sends no copy of a row whose lease
    # is held, so the copies that contend for a live lease are these.
    twice_client = Client(cluster.settings.model_copy(update={"duplicate_deliveries": True}))
    ledger = {"ledger": str(cluster.ledger)}
    run_ids = [str(twice_client.submit("skewed", {**ledger, "slow": slow_b})) for _ in range(RUNS)]
    cluster.wait_for(
        lambda: all(cluster.client.get_run(r).status is RunStatus.WAITING for r in run_ids),
        30,
        "every run to wait for its signal",
    )
    time.sleep(2.0)  # a wait timer armed five minutes early would have fired by now
    for run_id in run_ids:
        assert twice_client.signal(run_id, "go")
    twice_client.close()
    for run_id in run_ids:
        view = cluster.wait(run_id, timeout_s=60)
        assert view.status is RunStatus.SUCCEEDED, (run_id, view.reason)
    executions = cluster.executions()
    for run_id in run_ids:
        assert executions[(run_id, "a", 1)] == 1
        assert executions[(run_id, "b", 1)] == 1
        # A recovery of what nobody had claimed is no lost claim: with every run's slow
        # node holding the four processes, a message can wait in a worker while the
        # queue is empty (the copy sent again meets the claim: each node ran once).
        lost = [e for e in cluster.client.events(run_id) if lost_a_claim(e)]
        assert lost == [], lost
    stats = cluster.client.runtime.leases.stats()
    assert stats.get("lost", 0) == 0, stats
    assert stats.get("contended", 0) > 0, stats  # the duplicates did try to claim
    workers = {line.split()[5] for line in cluster.ledger.read_text().splitlines()}
    assert len(workers) >= 2, "both workers ran nodes"


def test_what_postgresql_compares_is_stamped_by_its_own_clock(
    database_url: str, tmp_path: Path
) -> None:
    """A process five minutes slow dispatches a node and records an effect's intent: the
    times recovery and the reconciler compare with PostgreSQL's clock are PostgreSQL's,
    or a fresh intent would look five minutes stale (and be checked, mid-call) and a
    fresh dispatch would look lost."""
    settings = Settings(
        database_url=database_url, home=tmp_path / "home", workflows=[str(WORKFLOWS)]
    )
    runtime = Runtime.build(settings)
    clock.skew(-SKEW_S)
    try:
        run_id = runtime.orchestrator.submit("chain10", {})
        ledger = EffectLedger(runtime.store, "default", run_id, "n1", 1, 1, 1, 100_000, phase="run")
        assert ledger._begin("t.effect", "k-1", Policy.FLAG, None) is None  # intent recorded
        with runtime.store.reading() as tx:
            now = tx.now()
            (execution,) = [e for e in tx.executions_of(run_id) if e.node == "n1"]
            (effect,) = tx.effects_of(run_id)
        for stamp in (execution.dispatched_at, effect.created_at, effect.updated_at):
            assert abs(to_epoch(stamp) - now) < 5, (stamp, now)
    finally:
        clock.skew(0.0)
        runtime.close()
