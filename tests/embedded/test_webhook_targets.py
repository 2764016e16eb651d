"""Which addresses webhooks may call, on delivery from the embedded runtime to a receiver
on loopback (a server on a thread of this process): an allowed loopback receiver gets the
signed post, and a host name rebinding to loopback is caught at connect. Host names are
answered by a stub resolver and connections go through a spy that connects to loopback
only and refuses anything else, so no test here ever reaches past this machine. The
rules themselves: tests/unit/test_webhook_targets.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cairn.model.statuses import RunStatus
from cairn.scheduler.notifier import Notifier
from cairn.webhooks import verify
from cairn.webhooks.transport import webhook_client
from tests.embedded.test_webhooks import _rows
from tests.support.embedded import wait
from tests.unit.test_webhook_targets import PUBLIC, ConnectSpy, Resolver
from tests.unit.test_webhooks import SECRET, _runtime


class Receiver:
    """A webhook receiver on loopback: what it was sent."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers.items()), body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        # It looks for shutdown() every 10 ms: at the default half second each test that
        # uses it would wait that long to end.
        serve = partial(self.server.serve_forever, poll_interval=0.01)
        threading.Thread(target=serve, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hooks = Receiver()
    yield hooks
    hooks.server.shutdown()
    hooks.server.server_close()


def test_an_allowed_loopback_receiver_gets_the_signed_post(
    tmp_path: Path, receiver: Receiver
) -> None:
    # The receiver is on loopback: only CAIRN_WEBHOOK_ALLOW_NETWORKS lets the notifier call it.
    runtime = _runtime(tmp_path, webhook_allow_networks="127.0.0.1")
    runtime.start_workers()
    spy = ConnectSpy()
    client = webhook_client(runtime.settings, Resolver(["127.0.0.1"]), spy)
    notifier = Notifier(runtime.store, runtime.settings, client=client)
    try:
        url = f"http://hooks.test:{receiver.port}/hook"
        run_id = runtime.orchestrator.submit("chain10", {}, webhook=url)
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        assert notifier.run_once() == 1
        (row,) = _rows(runtime, run_id)
        assert (row.attempts, row.last_status) == (1, 200)
        assert row.delivered_at is not None
        (headers, body) = receiver.requests[0]
        assert len(receiver.requests) == 1
        verify(body, headers["Cairn-Signature"], SECRET)
        assert headers["Host"] == f"hooks.test:{receiver.port}"  # the URL's, not the address
        assert spy.asked == [("127.0.0.1", receiver.port)]
    finally:
        notifier.close()
        runtime.close()


def test_a_rebinding_answer_is_caught_at_connect_and_given_up(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The first lookup answers a public address, the next one loopback — where a real
    receiver listens. Each connection is judged on its own lookup, the one it uses."""
    runtime = _runtime(tmp_path, webhook_retry_base_s=1e-6)
    runtime.start_workers()
    resolver, spy = Resolver([PUBLIC], ["127.0.0.1"]), ConnectSpy()
    notifier = Notifier(
        runtime.store, runtime.settings, client=webhook_client(runtime.settings, resolver, spy)
    )
    try:
        url = f"http://rebind.test:{receiver.port}/hook"
        run_id = runtime.orchestrator.submit("chain10", {}, webhook=url)
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        assert notifier.run_once() == 1  # public: connected to (the spy refuses: retried)
        (row,) = _rows(runtime, run_id)
        assert (row.attempts, row.given_up_at) == (1, None)
        assert "ConnectError" in row.last_error
        assert notifier.run_once() == 1  # loopback: refused before any connection
        (row,) = _rows(runtime, run_id)
        assert row.attempts == 2 and row.given_up_at is not None  # not retried
        assert row.last_error.startswith("refused: webhook: rebind.test (resolved to 127.0.0.1)")
        assert spy.asked == [(PUBLIC, receiver.port)]
        assert resolver.lookups == ["rebind.test", "rebind.test"]
        assert receiver.requests == []
        assert notifier.run_once() == 0
    finally:
        notifier.close()
        runtime.close()
