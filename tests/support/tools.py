"""A tools service for handlers that call HTTP themselves: answers any GET or POST with
``{"path", "n", "body"}`` (``n``: how often that path was asked) and counts every request
by path — the external side's count, which a replay must leave as it was."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def tools_server() -> Iterator[tuple[str, Counter[str]]]:
    """The service's URL and its count of requests by path, while it runs."""
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    class Tools(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            path = self.path.partition("?")[0]
            with lock:
                asked[path] += 1
                n = asked[path]
            data = json.dumps({"path": path, "n": n, "body": body}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Tools)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
