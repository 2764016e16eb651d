"""A small external system for the effects tests: it honours ``Idempotency-Key`` and can
be told to misbehave.

    python -m tests.integration.effect_service PORT

``POST /<kind>`` with a JSON body and an ``Idempotency-Key`` header applies the request
once per key (a repeated key gets the first response back, without applying again);
``GET /<kind>/<key>`` returns the record (404 if none); ``DELETE /<kind>/<key>`` removes
it (a change made outside cairn: a seeded discrepancy); ``GET /stats`` counts, per key,
how often it was applied and how often it was requested, and lists the fencing tokens
(``X-Cairn-Fence``) its requests carried. ``POST /faults`` with
``{"mode": "drop"|"error"|"slow", "times": n, "delay_s": s}`` makes the next ``n``
applying requests apply and then drop the connection without a response, apply and
then answer 500, or apply slowly. In memory: its lifetime is one test.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_lock = threading.Lock()
_records: dict[tuple[str, str], dict[str, Any]] = {}
_applied: Counter[str] = Counter()
_requested: Counter[str] = Counter()
_fences: dict[str, list[str | None]] = {}
_faults: dict[str, Any] = {"mode": None, "times": 0, "delay_s": 0.0}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts == ["stats"]:
            with _lock:
                self._reply(
                    200,
                    {
                        "applied": dict(_applied),
                        "requested": dict(_requested),
                        "fences": dict(_fences),
                        "records": len(_records),
                    },
                )
            return
        if len(parts) == 2:
            with _lock:
                record = _records.get((parts[0], parts[1]))
            self._reply(200, record) if record else self._reply(404, {"error": "not found"})
            return
        self._reply(404, {"error": "no such path"})

    def do_DELETE(self) -> None:
        parts = self.path.strip("/").split("/")
        with _lock:
            removed = _records.pop((parts[0], parts[1]), None) if len(parts) == 2 else None
        self._reply(200 if removed else 404, {"removed": bool(removed)})

    def do_POST(self) -> None:
        kind = self.path.strip("/")
        body = self._body()
        if kind == "faults":
            with _lock:
                _faults.update({"mode": None, "times": 0, "delay_s": 0.0, **body})
            self._reply(200, _faults)
            return
        key = self.headers.get("Idempotency-Key")
        if not key:
            self._reply(400, {"error": "Idempotency-Key is required"})
            return
        with _lock:
            _requested[key] += 1
            _fences.setdefault(key, []).append(self.headers.get("X-Cairn-Fence"))
            record = _records.get((kind, key))
            fresh = record is None
            if fresh:
                record = {"id": uuid.uuid4().hex, "kind": kind, "key": key, **body}
                _records[(kind, key)] = record
                _applied[key] += 1
            fault = None
            if fresh and _faults["mode"] and _faults["times"] > 0:
                _faults["times"] -= 1
                fault = _faults["mode"]
        if fault == "slow":
            time.sleep(float(_faults["delay_s"]))
        if fault == "drop":  # applied; the caller never hears of it
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if fault == "error":  # applied, and yet it says it failed
            self._reply(500, {"error": "internal error"})
            return
        self._reply(201 if fresh else 200, record)


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
