"""The HTTP side of the stand-in: each connection's handler routes a request to its
provider's wire format, holding, faulting or cutting off the answer as scripted."""

from __future__ import annotations

import json
import select
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from cairn.testing.model_server.anthropic_wire import message, message_stream
from cairn.testing.model_server.errors import error_answer, fault_answer
from cairn.testing.model_server.openai_wire import (
    chat_completion,
    chat_completion_stream,
    response,
    response_stream,
)
from cairn.testing.model_server.turns import Answer, Turn
from cairn.testing.model_server.values import Fault, Provider, Reply, Request, ResponderFailed

if TYPE_CHECKING:
    from cairn.testing.model_server.server import ModelServer


# The endpoint each path serves: (provider, API).
ROUTES: dict[str, tuple[Provider, str]] = {
    "/v1/chat/completions": ("openai", "chat"),
    "/v1/responses": ("openai", "responses"),
    "/v1/messages": ("anthropic", "messages"),
}

# A dropped stream still needs something to stream before it breaks off.
CUT_OFF_TEXT = "this stream is cut off before it ends"

BUILDERS: dict[tuple[str, bool], Callable[[Turn, dict[str, str]], Answer]] = {
    ("chat", False): chat_completion,
    ("chat", True): chat_completion_stream,
    ("responses", False): response,
    ("responses", True): response_stream,
    ("messages", False): message,
    ("messages", True): message_stream,
}


# --- the server -------------------------------------------------------------------------


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Many short-lived servers in a test run: rebinding a just-freed port must not fail.
    allow_reuse_address = True
    # Hundreds of clients connecting at once (a worker's awaiting nodes): socketserver's
    # backlog of 5 would drop their SYNs, and a client's connect timeout would fail them.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], owner: ModelServer) -> None:
        self.owner = owner
        super().__init__(address, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer (a timeout, a test done early) is not an error.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect
    # Small SSE writes must leave at once, not wait for an ACK (Nagle with delayed ACKs).
    disable_nagle_algorithm = True

    @property
    def owner(self) -> ModelServer:
        return cast(HTTPServer, self.server).owner

    def setup(self) -> None:
        super().setup()
        self.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.owner._closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test run's output is no place for an access log

    def do_GET(self) -> None:
        self._write(error_answer("openai", 404, f"No endpoint GET {self.path}.", {}))

    def do_POST(self) -> None:
        raw = self._read_body()
        route = ROUTES.get(urlsplit(self.path).path.rstrip("/"))
        if route is None:
            message = (
                f"No endpoint POST {self.path}: point OpenAI at ModelServer.openai_base_url "
                "(…/v1) and Anthropic at ModelServer.anthropic_base_url."
            )
            self._write(error_answer("openai", 404, message, {}))
            return
        provider, api = route
        headers = {name.lower(): value for name, value in self.headers.items()}
        request_id = self.owner._new_id("req_")
        reply_headers = {"x-request-id" if provider == "openai" else "request-id": request_id}
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._write(
                error_answer(provider, 400, "The body is not a JSON object.", reply_headers)
            )
            return
        stream = bool(body.get("stream"))
        request = Request(provider, self.path, body, headers, stream, time.time())
        wait = self.owner._over_rate()
        if wait is not None:
            # The provider's own request rate limit, as the stand-in enforces it: a 429
            # with the seconds until the window has room again.
            self.owner._logged(replace(request, refused=True))
            count, window = cast(tuple[int, float], self.owner.limit_requests)
            message = f"Rate limit reached for requests (the limit is {count} per {window:g}s)."
            retry = {**reply_headers, "retry-after": f"{max(wait, 0.001):.3f}"}
            self._write(error_answer(provider, 429, message, retry))
            return
        if not self.owner._began():
            # The provider's own concurrency limit, as the stand-in enforces it: a 429.
            self.owner._logged(replace(request, refused=True))
            limit = self.owner.limit_in_flight
            message = f"Too many concurrent requests (the limit is {limit})."
            self._write(error_answer(provider, 429, message, reply_headers))
            return
        try:
            self._answer(provider, api, request, reply_headers)
        finally:
            self.owner._ended()

    def _answer(
        self, provider: Provider, api: str, request: Request, reply_headers: dict[str, str]
    ) -> None:
        body, stream = request.body, request.stream
        try:
            item = self.owner._admit(request)
        except ResponderFailed as exc:
            self._write(error_answer(provider, 500, str(exc), reply_headers))
            return

        drop_after: int | None = None
        if isinstance(item, Fault):
            if item.hang:
                self.owner._stopping.wait()
                self.close_connection = True
                return
            if item.drop_after_chunks is None:
                self._write(fault_answer(item, provider, body, reply_headers))
                return
            drop_after = item.drop_after_chunks
            reply = Reply(text=CUT_OFF_TEXT)
        else:
            reply = item
            if (reply.delay_s and not self._hold(reply.delay_s)) or (
                reply.until_released and not self._held_until_released()
            ):
                self.close_connection = True
                return
        turn = Turn.of(reply, body, self.owner._new_id)
        answer = BUILDERS[api, stream](turn, reply_headers)
        self._write(answer, chunk_delay_s=reply.chunk_delay_s, drop_after=drop_after)
        if drop_after is None:
            self.owner._answered(request)

    def _hold(self, seconds: float) -> bool:
        """Wait ``seconds`` before answering; False if the server is stopping or the
        client went away meanwhile (a provider stops working on a request whose client
        hung up: it no longer counts against its limit)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.owner._stopping.wait(min(left, 0.05)):
                return False
            if self._client_gone():
                return False
        return True

    def _held_until_released(self) -> bool:
        """Wait for :meth:`ModelServer.release`; False as :meth:`_hold`."""
        while not self.owner._released.wait(0.05):
            if self.owner._stopping.is_set() or self._client_gone():
                return False
        return not self._client_gone()

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _write(
        self, answer: Answer, *, chunk_delay_s: float = 0.0, drop_after: int | None = None
    ) -> None:
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.events is None:
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            if drop_after is None:
                self.wfile.write(answer.body)
            else:
                self.wfile.write(answer.body[: len(answer.body) // 2])
                self.close_connection = True
            return
        # Chunked, not close-delimited: only then is a connection dropped mid-stream an
        # error the client can see, rather than what looks like the end of the body.
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for number, event in enumerate(answer.events):
            if drop_after is not None and number >= drop_after:
                # Closed without the final empty chunk: the client's read fails.
                self.close_connection = True
                return
            if number and chunk_delay_s and self.owner._stopping.wait(chunk_delay_s):
                self.close_connection = True
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")
