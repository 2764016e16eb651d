"""``cairn.http`` against a real ``cairn api`` process (PostgreSQL, Redis, a Celery worker
and the scheduler behind it): a submit whose answer a proxy loses is retried into one
run, the async client follows a run's stream to its end, and the API's refusals arrive
as cairn's error types."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from cairn.errors import IllegalTransition, NotWaiting, RunNotFound
from cairn.http import AsyncClient, Client, StreamEvent
from tests.integration.test_lease_metrics import free_ports
from tests.support.cluster import WORKFLOWS, Cluster

KEY = "http-client-key-0123456789"


@pytest.fixture
def api_url(cluster: Cluster) -> str:
    """A ``cairn api`` process of the test's own, answering."""
    (port,) = free_ports(1)
    cluster.client.register(WORKFLOWS, namespace="team")  # definitions are namespaced
    cluster.spawn("api", f"--port={port}", env={"CAIRN_API_KEYS": f"team:{KEY}"})
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    cluster.wait_for(ready, timeout_s=30, what="the API to be ready")
    return url


@dataclass
class Forwarded:
    method: str
    path: str
    idempotency_key: str | None
    status: int
    dropped: bool


@dataclass
class LosingProxy:
    """Between the client and the API: forwards every request, and for the first submit
    lets the API answer, then closes the client's connection without passing the answer
    on — the API did the work, the client never heard."""

    upstream: str
    seen: list[Forwarded] = field(default_factory=list)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.forward()

            def do_POST(self) -> None:
                self.forward()

            def forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                answer = httpx.request(
                    self.command, proxy.upstream + self.path, headers=headers, content=body
                )
                is_submit = (self.command, self.path) == ("POST", "/v1/runs")
                drop = is_submit and not any(f.dropped for f in proxy.seen)
                key = self.headers.get("Idempotency-Key")
                proxy.seen.append(Forwarded(self.command, self.path, key, answer.status_code, drop))
                if drop:
                    self.close_connection = True  # and not a byte of the answer
                    return
                self.send_response(answer.status_code)
                for name in ("content-type", "location", "retry-after"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *_args: Any) -> None:
                pass

        return Handler

    @classmethod
    def serving(cls, upstream: str) -> Iterator[tuple[LosingProxy, str]]:
        proxy = cls(upstream)
        server = ThreadingHTTPServer(("127.0.0.1", 0), proxy.handler())
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield proxy, f"http://127.0.0.1:{server.server_port}"
        finally:
            server.shutdown()
            server.server_close()


@pytest.fixture
def losing_proxy(api_url: str) -> Iterator[tuple[LosingProxy, str]]:
    yield from LosingProxy.serving(api_url)


def test_a_submit_whose_answer_is_lost_is_retried_into_one_run(
    cluster: Cluster, api_url: str, losing_proxy: tuple[LosingProxy, str]
) -> None:
    proxy, proxy_url = losing_proxy
    with Client(proxy_url, KEY) as client:
        submitted = client.submit("approval", {"ledger": str(cluster.ledger)})

    first, retried = proxy.seen
    assert first.dropped and not retried.dropped
    assert (first.status, retried.status) == (202, 200)  # made by the first, found by the retry
    assert first.idempotency_key is not None
    assert first.idempotency_key == retried.idempotency_key
    with Client(api_url, KEY) as client:
        runs = list(client.list_runs(workflow="approval", page_size=1))
    assert [run.id for run in runs] == [submitted.run_id]  # exactly one run exists
    assert runs[0].request_id == first.idempotency_key


def test_the_async_client_streams_a_run_to_its_end(cluster: Cluster, api_url: str) -> None:
    cluster.worker()
    cluster.scheduler()

    async def follow() -> tuple[list[StreamEvent], list[dict[str, Any]]]:
        async with AsyncClient(api_url, KEY) as client:
            submitted = await client.submit(
                "chain10", {"ledger": str(cluster.ledger), "slow": {"n4": 0.3}}
            )
            streamed = [event async for event in client.stream(submitted.run_id)]
            logged = await client.events(submitted.run_id)
            return streamed, logged.events

    streamed, logged = asyncio.run(asyncio.wait_for(follow(), timeout=60))
    end = streamed[-1]
    assert end.type == "end"
    assert end.data == {"status": "succeeded", "last_seq": logged[-1]["seq"]}
    assert [event.data for event in streamed if event.seq is not None] == logged
    assert [event.id for event in streamed if event.seq is not None] == [
        str(event["seq"]) for event in logged
    ]


def test_reads_signals_cancels_and_refusals_over_http(cluster: Cluster, api_url: str) -> None:
    cluster.worker()
    cluster.scheduler()
    with Client(api_url, KEY) as client:
        run_id = client.submit("approval", {"ledger": str(cluster.ledger)}).run_id
        cluster.wait_for(lambda: client.get_run(run_id).status == "waiting", 30, "the wait")
        waiting = client.get_run(run_id)
        assert waiting.nodes == {"draft": "succeeded", "review": "waiting"}
        assert waiting.namespace == "team"

        approved = client.signal(run_id, "approve", {"note": "ship it"}, signal_id="sig-1")
        assert approved.applied
        assert not client.signal(run_id, "approve", signal_id="sig-1").applied
        assert [event.type for event in client.stream(run_id)][-1] == "end"
        assert client.get_run(run_id).status == "succeeded"

        with pytest.raises(NotWaiting) as late:
            client.signal(run_id, "approve")
        assert (late.value.status, late.value.code) == (409, "not_waiting")
        with pytest.raises(IllegalTransition):
            client.cancel(run_id, "too late")
        with pytest.raises(RunNotFound):
            client.get_run("no-such-run")

        other = client.submit("approval", {"ledger": str(cluster.ledger)}).run_id
        cancelled = client.cancel(other, "not needed")
        assert cancelled.changed and cancelled.status in ("cancelling", "cancelled")
