"""``record: http`` on real services: a workflow whose handlers call a counting HTTP
service directly — httpx sync and async, requests, urllib; no ctx.effect, no ctx.model —
is replayed and forked (dry run) with zero requests reaching the service, and a request
that changed is reported, never sent."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster


class _Tools(BaseHTTPRequestHandler):
    asked: ClassVar[Counter[str]] = Counter()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        path = self.path.partition("?")[0]
        _Tools.asked[path] += 1
        data = json.dumps({"path": path, "n": _Tools.asked[path], "body": body}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def tools(cluster: Cluster) -> Iterator[Counter[str]]:
    _Tools.asked = Counter()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Tools)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cluster.env["TOOLS_URL"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield _Tools.asked
    finally:
        server.shutdown()
        server.server_close()


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
