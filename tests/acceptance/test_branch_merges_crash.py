"""Fan-out branches merging onto their runs while a worker is killed -9 (real
PostgreSQL, Redis and Celery workers): every run ends, every branch that finished ran
once, the join is decided once, and each run's row holds the state its log replays to."""

from __future__ import annotations

from sqlalchemy import text

from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support.cluster import Cluster
from tests.support.replay import replay_agrees

BRANCHES = [f"b{index}" for index in range(1, 9)]
RUNS = 4  # one b3 dawdling in each of the two workers' two slots


def test_kill_9_of_a_worker_amid_merging_branches_repeats_nothing_that_finished(
    cluster: Cluster,
) -> None:
    doomed = cluster.worker()
    cluster.worker()
    cluster.scheduler()
    # b3 dawdles on its first execution: killed then, it runs again; the rest finish
    # at once and merge, from both workers.
    run_ids = [cluster.submit("fan_merge", {"slow": {"b3": 6}}) for _ in range(RUNS)]

    def all_started() -> bool:
        return sum(cluster.executions()[(run_id, "b3", 1)] for run_id in run_ids) == RUNS

    cluster.wait_for(all_started, 30, "every b3 to start")
    finished_before = {
        run_id: {b for b in BRANCHES if b != "b3" and cluster.executions()[(run_id, b, 1)]}
        for run_id in run_ids
    }
    cluster.kill(doomed)  # SIGKILL: some b3s die holding their leases
    cluster.worker()
    cluster.all_succeeded(run_ids, timeout_s=120)
    counts = cluster.executions()
    # The four b3s held all four slots: the killed worker's two ran again.
    assert [counts[(run_id, "b3", 1)] for run_id in run_ids].count(2) >= 1
    runtime = Runtime.build(cluster.settings)
    try:
        for run_id in run_ids:
            assert counts[(run_id, "after", 1)] == 1, cluster.log_lines(run_id)
            assert counts[(run_id, "b3", 1)] in (1, 2)  # again only if killed mid-node
            for name in finished_before[run_id]:
                assert counts[(run_id, name, 1)] == 1, (run_id, name)
            replayed = replay_agrees(runtime, run_id)
            assert replayed.status is RunStatus.SUCCEEDED
            nodes = replayed.nodes
            assert all(nodes[name].status.value == "succeeded" for name in [*BRANCHES, "after"])
        with runtime.store.reading() as tx:
            merged = tx.connection.execute(
                text("SELECT count(*) FROM runs WHERE merged_to IS NOT NULL")
            ).scalar_one()
        assert merged > 0  # the branches merged: this is what the test puts under a kill
    finally:
        runtime.close()
