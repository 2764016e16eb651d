"""Deploying a build beside runs in flight, on real PostgreSQL, Redis, Celery workers and
a scheduler (docs/versions.md#pinned-builds-and-auto-upgrade).

Runs of a pinned and of an auto-upgrade workflow start on build v1 and wait for a signal
while a v2 worker (declaring itself compatible with v1) starts beside the v1 one: the
pinned runs' next node runs on v1 only, the auto-upgrade runs' on v2 — each node's
``node_succeeded`` says which build ran it. With the v1 workers gone, pinned runs waiting
for their next node show as waiting for a worker of v1 — ``cairn status``, the metric —
and do not fail, past several recovery periods; a v1 worker started again finishes them.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

from cairn.client import Client
from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster

ANNOUNCE = {"CAIRN_BUILD_ANNOUNCE_S": "0.5"}
STEP = "tests.integration.handlers:step"


def _workflow(name: str, versioning: str) -> str:
    return f"""
name: {name}
version: 1
versioning: {versioning}
start: quote
nodes:
  quote:   {{handler: "{STEP}", next: approve}}
  approve: {{wait: {{signals: {{approve: book}}, timeout: 1h, on_timeout: expired}}}}
  book:    {{handler: "{STEP}", next: done}}
  done:    {{end: succeeded}}
  expired: {{end: cancelled}}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _built_by(client: Client, run_id: str, node: str) -> list[str | None]:
    """The build each of ``node``'s node_succeeded events names, in order."""
    return [
        event["data"].get("build")
        for event in client.events(run_id)
        if event["type"] == "node_succeeded" and event["data"]["node"] == node
    ]


def _live(client: Client) -> set[str]:
    book = client.runtime.orchestrator.builds
    book.forget_live()
    return {build.build for build in book.live()}


def _builds(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """``cairn versions``' builds, by id."""
    listed = cluster.cli("versions", "--json", env=ANNOUNCE)
    assert listed.returncode == 0, listed.stderr
    return {build["build"]: build for build in json.loads(listed.stdout)["builds"]}


def _waiting_metric(port: int, workflow: str, build: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    # Prometheus writes a sample's labels in its own order: match them as a set.
    wanted = {f'workflow="{workflow}"', f'build="{build}"'}
    for found in re.finditer(r"^cairn_runs_waiting_for_worker\{(.*)\} (\S+)$", text, re.M):
        if set(found.group(1).split(",")) == wanted:
            return float(found.group(2))
    return None


def test_pinned_runs_stay_on_their_build_auto_upgrade_runs_move_on(
    cluster: Cluster, tmp_path: Path
) -> None:
    workflows = tmp_path / "workflows"
    workflows.mkdir()
    (workflows / "pinned_trip.yaml").write_text(_workflow("pinned_trip", "pinned"))
    (workflows / "upgrading_trip.yaml").write_text(_workflow("upgrading_trip", "auto-upgrade"))
    env = {**ANNOUNCE, "CAIRN_WORKFLOWS": str(workflows)}
    client = Client(cluster.settings.model_copy(update={"build_announce_s": 0.5}))
    try:
        port = _free_port()
        cluster.scheduler(CAIRN_METRICS_PORT=str(port), **env)
        v1 = cluster.worker(CAIRN_BUILD="v1", **env)
        cluster.consuming(v1)
        cluster.wait_for(lambda: _live(client) == {"v1"}, 30, "build v1 to be announced")

        ledger = {"ledger": str(cluster.ledger)}
        signalled = [client.submit("pinned_trip", ledger) for _ in range(3)]
        kept = [client.submit("pinned_trip", ledger) for _ in range(3)]
        upgrading = [client.submit("upgrading_trip", ledger) for _ in range(3)]
        every = [*signalled, *kept, *upgrading]
        cluster.wait_for(
            lambda: all(client.get_run(r).status is RunStatus.WAITING for r in every),
            60,
            "every run to wait for its approval",
        )
        for run_id in every:
            assert _built_by(client, run_id, "quote") == ["v1"]
            assert client.get_run(run_id).build == "v1"

        # v2 is deployed beside v1, and declares itself compatible with it.
        v2 = cluster.worker(CAIRN_BUILD="v2", CAIRN_COMPATIBLE_BUILDS="v1", **env)
        cluster.consuming(v2)
        cluster.wait_for(lambda: _live(client) == {"v1", "v2"}, 30, "build v2 to be announced")
        for run_id in [*signalled, *upgrading]:
            client.signal(run_id, "approve", {"by": "ops"}, node="approve")
        cluster.all_succeeded([*signalled, *upgrading], 60)
        for run_id in signalled:
            assert _built_by(client, run_id, "book") == ["v1"], run_id
        for run_id in upgrading:
            assert _built_by(client, run_id, "book") == ["v2"], run_id

        # The v1 workers are gone: pinned runs wait for one, they do not fail.
        cluster.kill(v1)
        cluster.wait_for(lambda: _live(client) == {"v2"}, 30, "build v1 to be no longer live")
        for run_id in kept:
            client.signal(run_id, "approve", {"by": "ops"}, node="approve")
        cluster.wait_for(
            lambda: _waiting_metric(port, "pinned_trip", "v1") == len(kept),
            30,
            "the metric to count the runs waiting for v1",
        )
        time.sleep(3 * cluster.settings.recovery_after)  # several recovery periods
        for run_id in kept:
            view = client.get_run(run_id)
            assert view.status is RunStatus.RUNNING, (run_id, view.status, view.reason)
            assert view.waiting_for_build == "v1"
            assert _built_by(client, run_id, "book") == []
        shown = cluster.cli("status", kept[0], env=ANNOUNCE)
        assert shown.returncode == 0, shown.stderr
        assert "waiting for a worker of build v1" in shown.stdout
        # Their nodes wait in the build's queue (with what the killed workers had taken
        # and not acknowledged), and the fleet's backlogs show it.
        fleet = json.loads(cluster.cli("status", "--fleet", "--json", env=ANNOUNCE).stdout)
        queued = fleet["queues"].get(f"{cluster.settings.queue}@v1")
        assert queued is not None and queued >= len(kept), fleet["queues"]
        builds = _builds(cluster)  # v1 may not go: pinned runs wait for it; v2 may
        assert (builds["v1"]["live"], builds["v1"]["needed_by"]) == (False, len(kept))
        assert not builds["v1"]["safe_to_retire"] and builds["v2"]["safe_to_retire"]
        listed = cluster.cli("versions", "pinned_trip", env=ANNOUNCE)
        assert "v1  not seen for" in listed.stdout, listed.stdout
        assert f"{len(kept)} run(s) in flight wait for a worker of it" in listed.stdout

        # A v1 worker again: they finish, on v1.
        again = cluster.worker(CAIRN_BUILD="v1", **env)
        cluster.consuming(again)
        cluster.all_succeeded(kept, 60)
        for run_id in kept:
            assert _built_by(client, run_id, "book") == ["v1"], run_id
            assert client.get_run(run_id).waiting_for_build is None
        cluster.wait_for(
            lambda: _waiting_metric(port, "pinned_trip", "v1") is None,
            30,
            "the metric to drop the runs once they finished",
        )
        assert _builds(cluster)["v1"]["safe_to_retire"]  # drained: nothing needs it
    finally:
        client.close()
