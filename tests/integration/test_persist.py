"""persist: cached on real Redis and Celery workers: the parts of a weekly report are
computed once per week within their TTL, across runs, and storing the final report
invalidates them."""

from __future__ import annotations

from cairn.orchestrator.statuses import RunStatus
from tests.integration.conftest import Cluster


def part_executions(cluster: Cluster) -> int:
    return sum(
        count
        for (_run, node, _visit), count in cluster.executions().items()
        if node in ("sales", "traffic", "costs")
    )


def test_cached_parts_are_reused_across_runs_until_the_final_report_is_stored(
    cluster: Cluster,
) -> None:
    cluster.worker(concurrency=3)
    cluster.scheduler()
    failed = cluster.submit("weekly_report", {"week": "2026-W48", "fail_final": True})
    assert cluster.wait(failed).status is RunStatus.FAILED
    assert part_executions(cluster) == 3
    # The report again, same week: the parts come from the cache; the final is stored.
    again = cluster.submit("weekly_report", {"week": "2026-W48"})
    view = cluster.wait(again)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert part_executions(cluster) == 3
    assert view.state is not None
    assert view.state.vars["report"] == (
        "sales of week 2026-W48 / traffic of week 2026-W48 / costs of week 2026-W48"
    )
    # Each part is still a step of its own run, with its result recorded.
    assert sorted(
        e["data"]["node"] for e in cluster.client.events(again) if e["type"] == "node_succeeded"
    ) == [
        "costs",
        "final",
        "sales",
        "traffic",
    ]
    # Stored: the cached parts are gone, and another week is another entry anyway.
    third = cluster.submit("weekly_report", {"week": "2026-W48"})
    assert cluster.wait(third).status is RunStatus.SUCCEEDED
    assert part_executions(cluster) == 6
    other_week = cluster.submit("weekly_report", {"week": "2026-W49"})
    assert cluster.wait(other_week).status is RunStatus.SUCCEEDED
    assert part_executions(cluster) == 9
