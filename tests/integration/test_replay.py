"""Replay and fork on PostgreSQL with a real Celery worker and the real HTTP effect
service (which counts every request and honours Idempotency-Key): replays and fork dry
runs, any number of times, never call the service and leave every row as it was; a
changed handler is reported at the step it changes; a live fork is linked to its parent
and reaches the service under keys of its own."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner, Result

from cairn.cli import replay as replay_cli  # noqa: F401 - registers the commands
from cairn.cli import runs as runs_cli  # noqa: F401 - registers cairn status
from cairn.cli.main import app
from cairn.model.statuses import RunStatus
from cairn.timetravel import register_stub
from cairn.timetravel.fork import Ending, dry_run, fork_point
from cairn.timetravel.ledger import Answer, unregister_stub
from cairn.timetravel.replay import Replayer, Verdict
from tests.integration import replay_handlers
from tests.support.cluster import Cluster
from tests.support.shop import Service

NODES = ("reserve", "charge", "invoice", "ship", "notify")
# Every table a replay or a dry run could write to, were it not isolated.
TABLES = {
    "runs": "*",
    "events": "*",
    "snapshots": "*",
    "node_executions": "*",
    "effects": "*",
    "artifacts": "*",
    "outbox": "id, run_id, topic, payload, created_at",
    "inbox": "*",
    "timers": "*",
    "notifications": "*",
}


@pytest.fixture
def shop(cluster: Cluster, service: Service) -> Cluster:
    cluster.env["EFFECT_SERVICE_URL"] = service.url
    cluster.consuming(cluster.worker(concurrency=2))
    return cluster


def command(cluster: Cluster, *args: str, stdin: str | None = None) -> Result:
    """A command in this process: replays run the handlers of this process's code."""
    cairn_env = {k: v for k, v in cluster.env.items() if k.startswith("CAIRN_")}
    return CliRunner().invoke(app, list(args), env=cairn_env, input=stdin)


def rows(cluster: Cluster) -> dict[str, list[str]]:
    """Every row of every table (of the outbox, all but when each message was marked
    sent: processes mark their publishes lazily)."""
    with psycopg.connect(str(cluster.settings.database_url)) as conn:
        return {
            table: sorted(repr(row) for row in conn.execute(f"SELECT {columns} FROM {table}"))
            for table, columns in TABLES.items()
        }


def requested(world: Service) -> dict[str, int]:
    return dict(world.stats()["requested"])


def finished_order(cluster: Cluster, world: Service, order: str) -> str:
    run_id = cluster.submit("replay_shop", {"order": order, "amount": 100})
    assert cluster.wait(run_id, 30).status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert requested(world) == {f"{order}:{node}": 1 for node in NODES}
    return run_id


def seq_of(cluster: Cluster, run_id: str, node: str) -> int:
    (step,) = [s for s in cluster.client.timeline(run_id).steps() if s.node == node]
    return step.seq


def test_replays_and_dry_runs_never_reach_the_world(
    shop: Cluster,
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = finished_order(shop, service, "o-1")
    calls, before = requested(service), rows(shop)
    orchestrator = shop.client.runtime.orchestrator
    after_charge = seq_of(shop, run_id, "charge")

    # (a) Three replays and three fork dry runs: every step the same, nothing called.
    for _ in range(3):
        replayed = command(shop, "replay", run_id, "--json")
        assert replayed.exit_code == 0, replayed.output
        report = json.loads(replayed.stdout)
        assert report["counts"] == {"same": 5, "diverged": 0, "refused": 0, "skipped": 0}
        assert report["namespace"] == "default.replay"
        answers = [e["answer"] for s in report["steps"] for e in s["replayed"]["effects"]]
        assert answers == [Answer.RECORDED] * 5
    for patch in ('{"amount": 100}', '{"amount": 250}', '{"note": "what if"}'):
        dry = command(shop, "fork", run_id, "--at", str(after_charge), "--patch", patch, "--json")
        assert dry.exit_code == 0, dry.output
        found = json.loads(dry.stdout)
        assert found["dry_run"] and found["ending"] == Ending.ENDED
        assert found["status"] == "succeeded"
        assert found["lineage"] == {"parent_run_id": run_id, "fork_seq": after_charge}
        assert [s["label"] for s in found["steps"]] == ["invoice#2/1", "ship#1/1", "notify#1/1"]
        assert {e["answer"] for e in found["effects"]} == {Answer.RECORDED}
    assert json.loads(dry.stdout)["vars"]["note"] == "what if"
    assert requested(service) == calls and rows(shop) == before

    # (b) A changed handler (here: this process's tax rate) diverges at its step.
    monkeypatch.setattr(replay_handlers, "TAX_RATE", 0.25)
    diverged = command(shop, "replay", run_id, "--json")
    assert diverged.exit_code == 1, diverged.output
    first = json.loads(diverged.stdout)["first_divergence"]
    assert (first["seq"], first["node"], first["iteration"]) == (
        seq_of(shop, run_id, "invoice"),
        "invoice",
        1,
    )
    changes = {c["path"]: c for c in first["changes"]}
    assert (changes["output.total"]["old"], changes["output.total"]["new"]) == (110.0, 125.0)
    shown = command(shop, "replay", run_id)
    assert shown.exit_code == 1 and "first divergence: seq" in shown.output
    assert "~ output.total: 110.0 -> 125.0" in shown.output
    monkeypatch.setattr(replay_handlers, "TAX_RATE", 0.1)

    # (d) An effect never recorded, without a stub: refused, never called; with one: stubbed.
    monkeypatch.setattr(replay_handlers, "AUDIT", True)
    report = Replayer(orchestrator, run_id).run()
    (refused,) = report.refused
    assert (refused.step.node, refused.verdict) == ("notify", Verdict.REFUSED)
    assert "audit.log 'o-1:audit' was never recorded; no replay stub" in refused.note
    assert command(shop, "replay", run_id).exit_code == 3
    register_stub("audit.log", replay_handlers.fake_audit)
    try:
        stubbed = Replayer(orchestrator, run_id).run(seq_of(shop, run_id, "notify"))
    finally:
        unregister_stub("audit.log")
    assert [s.verdict for s in stubbed.steps] == [Verdict.SAME]
    assert stubbed.steps[0].executed is not None
    assert [u.answer for u in stubbed.steps[0].executed.effects] == [
        Answer.RECORDED,
        Answer.STUBBED,
    ]
    assert requested(service) == calls and rows(shop) == before


def test_a_dry_run_then_a_live_fork(
    shop: Cluster,
    service: Service,
) -> None:
    run_id = finished_order(shop, service, "o-2")
    calls = requested(service)
    orchestrator = shop.client.runtime.orchestrator
    at = seq_of(shop, run_id, "charge")
    patch = {"amount": 250}

    found = dry_run(orchestrator, fork_point(orchestrator, run_id, at, patch))
    assert found.ending == Ending.ENDED and found.state.vars["total"] == 275.0
    assert requested(service) == calls  # the dry run called nothing

    declined = command(shop, "fork", run_id, "--at", str(at), "--live", stdin="n\n")
    assert declined.exit_code == 1 and "nothing started" in declined.output
    live = command(
        shop, "fork", run_id, "--at", str(at), "--patch", json.dumps(patch), "--live", "--yes"
    )
    assert live.exit_code == 0, live.output
    fork_id = live.output.split()[0]
    view = shop.wait(fork_id, 30)
    assert view.status is RunStatus.SUCCEEDED, shop.log_tails()

    # Lineage, on the row and as cairn status shows it.
    with psycopg.connect(str(shop.settings.database_url)) as conn:
        lineage = conn.execute(
            "SELECT parent_run_id, fork_seq, namespace FROM runs WHERE id = %s", (fork_id,)
        ).fetchone()
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()
    assert lineage == (run_id, at, "default")
    assert runs == (2,)  # the parent and the live fork: dry runs left no row
    assert (view.parent_run_id, view.fork_seq) == (run_id, at)
    status = command(shop, "status", fork_id)
    assert f"forked from run {run_id} at seq {at}" in status.output

    # Only the live fork called the service, for what it ran again, under fresh keys.
    new = {key: count for key, count in requested(service).items() if key not in calls}
    assert new == {f"o-2:{node}@fork:{fork_id}": 1 for node in ("invoice", "ship", "notify")}
    assert {key: requested(service)[key] for key in calls} == calls
    invoice: Any = service.call("GET", f"/invoice/o-2:invoice@fork:{fork_id}")
    assert invoice["total"] == 275.0  # the patch applied
    assert view.state is not None and view.state.vars["amount"] == 250
    assert view.state.vars["charge_id"] == orchestrator.get_run(run_id).result["charge_id"]  # type: ignore[index]

    # The live fork replays like any run: its own (scoped) effects, nothing called.
    report = Replayer(orchestrator, fork_id).run()
    assert [s.verdict for s in report.steps] == [Verdict.SAME] * 3
    assert sum(requested(service).values()) == 8
