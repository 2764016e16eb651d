"""Migrating runs in flight between versions of their workflow, on PostgreSQL with real
workers, a scheduler and the command line as an operator runs it (docs/versions.md).

A hundred runs of ``journey@1`` wait for a signal when ``journey@2`` is registered beside it.
Ten of them are made unmovable on purpose: four wait at ``hold``, a node version 2
removed; three carry an amount the new ``state:`` schema refuses; three wait for a
confirmation while their packing is still running on a worker (an execution in flight).
The dry run names exactly those ten, each with its reason, and writes nothing; the
migration moves the other ninety, each with one ``run_migrated`` event; a migrated run
signalled completes on version 2's nodes; a migration rolled back returns its run to
version 1, which then completes on version 1's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster

FLOWS = Path(__file__).resolve().parent / "migration_workflows"
MAP = "tests.integration.migration_maps:journey_1_to_2"
MOVE = ["runs", "migrate", "--from", "journey@1", "--to", "journey@2", "--map", MAP]


def _migrate(cluster: Cluster, *options: str) -> dict[str, Any]:
    done = cluster.cli(*MOVE, *options, "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _heads(cluster: Cluster, run_ids: list[str]) -> dict[str, tuple[int, int, str]]:
    """Each run's version, last seq and status, as the database has them."""
    with cluster.client.runtime.store.reading() as tx:
        found = {run_id: tx.run(run_id) for run_id in run_ids}
    return {
        run_id: (row.version, row.last_seq, row.status.value)
        for run_id, row in found.items()
        if row is not None
    }


def _ran(cluster: Cluster, run_id: str) -> list[str]:
    return [
        e["data"]["node"] for e in cluster.client.events(run_id) if e["type"] == "node_succeeded"
    ]


def test_a_hundred_waiting_runs_are_checked_then_moved_and_one_moved_back(
    cluster: Cluster, tmp_path: Path
) -> None:
    client = cluster.client
    client.register(FLOWS / "journey_v1.yaml")
    cluster.worker(concurrency=4)
    cluster.scheduler()
    release = tmp_path / "release"
    plain = [cluster.submit("journey", {"kind": "review", "amount": n}) for n in range(90)]
    removed = [cluster.submit("journey", {"kind": "hold", "amount": 5}) for _ in range(4)]
    unfit = [cluster.submit("journey", {"kind": "review", "amount": "ten"}) for _ in range(3)]
    packing = {"kind": "ship", "amount": 1, "release": str(release), "call_s": 600}
    busy = [cluster.submit("journey", packing) for _ in range(3)]
    everyone = [*plain, *removed, *unfit, *busy]
    cluster.wait_for(
        lambda: (
            all(n == 1 for (r, node, _i), n in cluster.executions().items() if node == "pack")
            and sum(node == "pack" for (_r, node, _i) in cluster.executions()) == 3
        ),
        60,
        "the packing to run",
    )
    for run_id in everyone:
        view = client.get_run(run_id)
        assert view.state is not None and view.state.waiting_on is not None, view.status
    client.register(FLOWS / "journey_v2.yaml")
    before = _heads(cluster, everyone)

    dry = _migrate(cluster, "--dry-run")

    unmovable = {
        run["run_id"]: tuple(r["code"] for r in run["reasons"])
        for run in dry["runs"]
        if run["reasons"]
    }
    assert unmovable == {
        **dict.fromkeys(removed, ("node_removed",)),
        **dict.fromkeys(unfit, ("state_schema",)),
        **dict.fromkeys(busy, ("in_flight",)),
    }
    assert (dry["selected"], dry["movable"], dry["moved"]) == (100, 90, 0)
    assert {run["to_node"] for run in dry["runs"] if run["movable"]} == {"approval"}
    assert _heads(cluster, everyone) == before  # a dry run writes nothing

    done = _migrate(cluster, "--reason", "review renamed")

    assert (done["selected"], done["moved"]) == (100, 90)
    assert {run["run_id"] for run in done["runs"] if run["moved"]} == set(plain)
    after = _heads(cluster, everyone)
    for run_id in plain:
        version, seq, status = after[run_id]
        assert (version, seq, status) == (2, before[run_id][1] + 1, "waiting")
        (event,) = [e for e in client.events(run_id) if e["type"] == "run_migrated"]
        assert event["seq"] == seq
        data = event["data"]
        assert (data["from_version"], data["to_version"], data["node"]) == (1, 2, "approval")
        assert data["actor"] == client.actor and data["reason"] == "review renamed"
        assert data["mapping"] == MAP
    for run_id in [*removed, *unfit, *busy]:
        assert after[run_id] == before[run_id]  # left as they were

    first, second = plain[0], plain[1]
    assert client.signal(first, "approve")
    assert cluster.wait(first, timeout_s=60).status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert _ran(cluster, first) == ["check", "book"]  # version 2's path

    undone = cluster.cli("runs", "migrate", "--rollback", second, "--reason", "not this one")
    assert undone.returncode == 0, undone.stderr
    view = client.get_run(second)
    assert view.version == 1 and view.state is not None
    assert view.state.waiting_on is not None and view.state.waiting_on.node == "review"
    last = client.events(second)[-1]
    assert last["type"] == "run_migrated" and last["data"]["undoes"] == after[second][1]
    assert client.signal(second, "approve")
    assert cluster.wait(second, timeout_s=60).status is RunStatus.SUCCEEDED
    assert _ran(cluster, second) == ["book"]  # version 1's path

    refused = cluster.cli("runs", "migrate", "--rollback", first)
    assert refused.returncode == 2 and "not_migratable" in refused.stderr
    release.touch()  # the packing may end now
