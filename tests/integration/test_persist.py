"""persist: cached on real Redis and Celery workers: the parts of a weekly report are
computed once per week within their TTL, across runs, and storing the final report
invalidates them."""

from __future__ import annotations

from cairn.model.keys import ExecutionKey
from cairn.model.statuses import RunStatus
from cairn.testing.model_server import ModelServer, Reply
from tests.support.cluster import Cluster
from tests.support.tools import tools_server


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


def test_ephemeral_nodes_are_committed_with_the_durable_node_after_them(
    cluster: Cluster,
) -> None:
    worker = cluster.worker(CAIRN_LOG_TASKS="true")  # a line per task received
    cluster.scheduler()
    cluster.consuming(worker)  # no recovery entry in the events (see Cluster.consuming)
    run_id = cluster.submit("lookup")
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    events = cluster.client.events(run_id)
    assert [(e["type"], e["data"].get("node")) for e in events] == [
        ("run_started", None),
        ("node_succeeded", "fetch"),
        ("node_succeeded", "shape"),
        ("node_succeeded", "store"),
    ]
    # One worker message, one commit: the three results arrived together.
    text = worker.log_path.read_text()  # type: ignore[attr-defined]
    assert "Task lookup.fetch[" in text
    assert "Task lookup.shape[" not in text and "Task lookup.store[" not in text
    with cluster.client.runtime.store.reading() as tx:
        executions = {e.node: e.status for e in tx.executions_of(run_id)}
        # The fused nodes' messages are marked sent as they are written (never published);
        # fetch's is marked when its submitter next writes, or by the relay.
        fused_unsent = tx.connection.exec_driver_sql(
            "SELECT count(*) FROM outbox WHERE sent_at IS NULL AND payload->>'node' <> 'fetch'"
        ).scalar()
        fused = tx.connection.exec_driver_sql(
            "SELECT count(*) FROM outbox WHERE payload->>'node' IN ('shape', 'store')"
        ).scalar()
    assert executions == {"fetch": "succeeded", "shape": "succeeded", "store": "succeeded"}
    assert (fused, fused_unsent) == (2, 0)
    assert view.state is not None and view.state.vars["last"] == "store"


def test_a_crash_before_the_commit_recomputes_the_ephemeral_nodes(cluster: Cluster) -> None:
    """The durable node's worker dies mid-node: nothing of the three was committed, so
    recovery runs the ephemeral ones again — a pure query is as cheap to redo as to keep."""
    worker = cluster.worker(concurrency=1)
    cluster.scheduler()
    run_id = cluster.submit("lookup", {"slow": {"store": 30}})
    cluster.wait_for(lambda: cluster.executions()[(run_id, "store", 1)] == 1, 30, "store")
    cluster.kill(worker)
    cluster.worker()
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert [counts[(run_id, node, 1)] for node in ("fetch", "shape", "store")] == [2, 2, 2]
    node_results = [e for e in cluster.client.events(run_id) if e["type"] == "node_succeeded"]
    assert [e["data"]["node"] for e in node_results] == ["fetch", "shape", "store"]


def test_a_durable_node_run_on_after_an_ephemeral_one_keeps_its_set_up(
    cluster: Cluster,
) -> None:
    """Three runs of a query (ephemeral) then an agent step allowed one at a time: the
    worker that runs the query runs the step on in the same go when its slot is free —
    and the step's model call is recorded (under the chain's claim: fence 0), its
    checkpoint saved, its HTTP recorded; when the slot is taken, the chain ends before
    the step, which waits for it. Never two steps at the model at once; a replay of each
    run sends nothing."""
    with ModelServer() as model, tools_server() as (tools_url, tools):
        model.script(*(Reply(text="stones", delay_s=0.5) for _ in range(3)))
        cluster.env.update(MODEL_URL=model.url, TOOLS_URL=tools_url)
        worker = cluster.worker(concurrency=3)
        cluster.consuming(worker)
        cluster.scheduler()
        runs = [cluster.submit("fused_agent") for _ in range(3)]
        cluster.all_succeeded(runs, 60)
        assert model.count() == 3 and model.peak_in_flight == 1  # waited for its slot
        assert tools["/lookup"] == 3
        fences = []
        for run_id in runs:
            view = cluster.wait(run_id)
            assert view.state is not None
            assert view.state.vars["checkpoint"] == 1 and view.state.vars["answer"] == "stones"
            with cluster.client.runtime.store.reading() as tx:
                calls = tx.model_calls_of(ExecutionKey(run_id, "think", 1, "run"))
            assert [(c.call_index, c.provider) for c in calls] == [(0, "openai"), (1, "http")]
            fences.append(calls[0].fence)
        # At least one ran on after its query, in one go; one that found the slot taken
        # ran from its own message, under its own claim.
        assert 0 in fences and any(fence > 0 for fence in fences), fences
        for run_id in runs:
            replayed = cluster.cli("replay", run_id, "--json")
            assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert model.count() == 3 and tools["/lookup"] == 3
