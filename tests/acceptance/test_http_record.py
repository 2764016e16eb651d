"""``record: http`` on real services: a workflow whose handlers call a counting HTTP
service directly — httpx sync and async, requests, urllib; no ctx.effect, no ctx.model —
is replayed and forked (dry run) with zero requests reaching the service, and a request
that changed is reported, never sent."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster
from tests.support.tools import tools_server


@pytest.fixture
def tools(cluster: Cluster) -> Iterator[Counter[str]]:
    with tools_server() as (url, asked):
        cluster.env["TOOLS_URL"] = url
        yield asked


def test_a_nodes_own_http_is_recorded_and_replay_and_fork_send_none(
    cluster: Cluster, tools: Counter[str]
) -> None:
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    run_id = cluster.submit("http_recorded", {"q": "stone piles"})
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None
    assert view.state.vars["search"]["body"] == {"q": "stone piles"}
    assert view.state.vars["news"]["path"] == "/news"
    assert dict(tools) == {"/weather": 1, "/search": 1, "/time": 1, "/news": 1}

    replayed = cluster.cli("replay", run_id, "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["diverged"] is False
    seq = min(e["seq"] for e in cluster.client.events(run_id))
    forked = cluster.cli("fork", run_id, "--at", str(seq), "--json")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert sum(tools.values()) == 4  # not one request from either

    changed = cluster.cli("replay", run_id, "--json", env={"TOOLS_QUERY": "?units=metric"})
    report = json.loads(changed.stdout)
    assert report["diverged"] is True, report
    error = report["first_divergence"]["replayed"]["error"]
    assert "HTTP request 0 diverged" in error, error
    assert sum(tools.values()) == 4


def test_a_handlers_plain_http_is_never_sent_again_by_replay_fork_or_bisect(
    cluster: Cluster, tools: Counter[str]
) -> None:
    """A node without ``record: http`` whose handler posts to a chat service with
    requests (and swallows what goes wrong): a replay, a fork's dry run and bisect send
    nothing; the replay reports the refused request as the step's divergence and the
    dry run stops at it."""
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    run_id = cluster.submit("plain_http", {"text": "hello"})
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert dict(tools) == {"/chat": 1}
    chat = f"HTTP POST {cluster.env['TOOLS_URL']}/chat"

    replayed = cluster.cli("replay", run_id, "--json")
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr  # diverged
    first = json.loads(replayed.stdout)["first_divergence"]
    assert first["node"] == "post" and chat in first["note"], first
    assert "record: http" in first["note"] and "never sends it" in first["note"], first
    assert first["replayed"]["refused_calls"] and first["replayed"]["output"] == {"posted": None}

    seq = min(e["seq"] for e in cluster.client.events(run_id))
    forked = cluster.cli("fork", run_id, "--at", str(seq), "--json")
    assert forked.returncode == 3, forked.stdout + forked.stderr  # refused
    dry = json.loads(forked.stdout)
    assert dry["ending"] == "refused" and chat in dry["detail"], dry

    bisected = cluster.cli(
        "bisect", run_id, "--check", "tests.integration.http_handlers:posted", "--json"
    )
    assert json.loads(bisected.stdout)["verdict"] == "found", bisected.stdout
    assert dict(tools) == {"/chat": 1}  # not one more request from any of the three
