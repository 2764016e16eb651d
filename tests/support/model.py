"""A model endpoint for tests, in the test's process: ``POST /turn`` with ``{"run", "turn"}``
answers ``{"reply": "reply <turn>"}`` and notes every request, so a test can see which
turns an agent loop asked for, and how often. ``hold_at``: the first request for that
turn is never answered (the test kills the caller meanwhile); ``holding`` is set then."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ModelStandIn:
    url: str = ""
    hold_at: int | None = None
    asked: list[int] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def counts(self) -> Counter[int]:
        with self._lock:
            return Counter(self.asked)


@contextmanager
def model_stand_in(hold_at: int | None = None) -> Iterator[ModelStandIn]:
    model = ModelStandIn(hold_at=hold_at)

    class Turn(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            turn = int(body["turn"])
            with model._lock:
                first = turn not in model.asked
                model.asked.append(turn)
            if turn == model.hold_at and first:
                model.holding.set()
                model._release.wait()  # the caller is killed meanwhile
                return
            self._reply({"reply": f"reply {turn}"})

        def _reply(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Turn)
    server.daemon_threads = True
    model.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        model._release.set()
        server.shutdown()
        server.server_close()
