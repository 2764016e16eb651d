"""A stand-in for an outside system a workflow depends on (a payment service): it answers
503 (or ``status``) while it is down, or to the next ``fail_next`` requests, 200 when
up, and counts every request it gets — the external side's count of attempts, which a
circuit breaker must keep flat during an outage."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class DependencyServer:
    def __init__(self) -> None:
        self.down = threading.Event()
        self.status = 503  # what it answers while down
        self.fail_next = 0  # requests still to answer with ``status``, down or not
        self._lock = threading.Lock()
        self.requests: list[tuple[float, bool]] = []  # (when, answered while down)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                import time  # noqa: PLC0415

                with server._lock:
                    down = server.down.is_set() or server.fail_next > 0
                    server.fail_next = max(0, server.fail_next - 1)
                    server.requests.append((time.time(), down))
                self.send_response(server.status if down else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def count(self, *, since: float = 0.0) -> int:
        with self._lock:
            return sum(1 for at, _down in self.requests if at >= since)


@contextmanager
def dependency_server() -> Iterator[DependencyServer]:
    server = DependencyServer()
    thread = threading.Thread(target=server._httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._httpd.shutdown()
        server._httpd.server_close()
