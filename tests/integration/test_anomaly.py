"""Anomaly detection with real PostgreSQL, Redis and a Celery worker: an agent loop that
stops making progress is given one hint (its handler sees it in ``ctx.messages``), then
fails with ``anomaly:no_progress`` and the scene, shown by ``cairn status`` and in the
event log; the same loop making progress runs to the end untouched."""

from __future__ import annotations

from typing import Any

from cairn.lease.redis import RedisLeases
from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster


def cli(cluster: Cluster, *args: str) -> str:
    """`cairn ARGS` against the cluster's services; its standard output."""
    done = cluster.cli(*args)
    assert done.returncode == 0, f"cairn {' '.join(args)}: {done.stderr}"
    return done.stdout


def _history(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    return [e for e in cluster.client.events(run_id) if not e["type"].startswith("audit.")]


def test_a_stuck_agent_is_hinted_once_then_failed_with_the_scene(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("anomaly_agent", {"question": "what is cairn?"})
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.FAILED, cluster.log_tails()
    assert view.reason is not None and view.reason.startswith("anomaly:no_progress: ")
    state = view.state
    assert state is not None
    # One hint, which the handler saw in ctx.messages on its next visit.
    hints = [m for m in state.messages if m.get("cairn") == "anomaly"]
    assert [h["content"] for h in hints] == [
        "You keep making the same plan (no_progress). Try something else."
    ]
    seen = state.vars["hints_seen_at"]
    assert seen["content"] == hints[0]["content"] and seen["visit"] >= 2
    assert state.vars["hints_seen"] == 1
    # The scene: what was done about each detection, the moves with their fingerprints.
    assert [(a["kind"], a["action"]) for a in state.anomalies] == [
        ("no_progress", "intervened"),
        ("no_progress", "failed"),
    ]
    scene = state.anomalies[-1]["scene"]
    assert scene["streak"] == 4
    assert {node for node, _fp in scene["moves"]} == {"think", "act"}
    assert scene["moves"][-1][1] == scene["fingerprint"]
    # In the event log: the intervention and the stop, as moves of the run.
    moves = [
        tuple(move)
        for entry in _history(cluster, run_id)
        for move in entry["outcome"]["transitions"]
        if move[1].startswith("anomaly_")
    ]
    assert [m[1] for m in moves] == [
        "anomaly_intervened:no_progress",
        "anomaly_detected:no_progress",
    ]
    assert moves[1][2] == "(failed)"
    reported = [
        command
        for entry in _history(cluster, run_id)
        for command in entry["outcome"]["commands"]
        if command["command"] == "ReportAnomaly"
    ]
    assert [(c["kind"], c["action"]) for c in reported] == [
        ("no_progress", "intervened"),
        ("no_progress", "failed"),
    ]
    # And for a person: cairn status and cairn events.
    shown = cli(cluster, "status", run_id)
    assert "reason: anomaly:no_progress" in shown
    assert "anomaly no_progress at " in shown and ": intervened: " in shown
    assert "  moves: " in shown and "think@" in shown
    events = cli(cluster, "events", run_id)
    assert "-anomaly_intervened:no_progress->" in events
    assert "-anomaly_detected:no_progress-> (failed)" in events
    # And for the fleet: counted once each, whichever worker committed the decision.
    counted = RedisLeases.from_url(cluster.settings.redis_url or "").stats()
    assert counted["anomalies|anomaly_agent|no_progress|intervened"] == 1
    assert counted["anomalies|anomaly_agent|no_progress|failed"] == 1


def test_the_same_loop_making_progress_is_left_alone(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("anomaly_agent", {"progress": True, "answer_after": 8})
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.state is not None
    assert view.state.vars["answer"] == "found after 8 rounds"
    assert view.state.anomalies == []
    assert not [m for m in view.state.messages if m.get("cairn") == "anomaly"]
    assert view.state.anomaly is not None and view.state.anomaly.steps == 16
