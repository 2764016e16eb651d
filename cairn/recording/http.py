"""``record: http``: a handler's own outbound HTTP — through httpx (sync and async, and
httpx2, the model SDKs' own), requests or urllib — recorded with its step, and answered
from the record when the node runs again or is replayed; in a replay, any other request
(a node without ``record: http``, aiohttp) is refused, never sent.

While such a node's handler runs (:func:`recording`), each request it sends is one of the
execution's recorded calls (:class:`~cairn.recording.calls.ModelCalls`, in the same order
as its model calls): method, URL, the body's digest and content type as the request; the
status, headers and body as the response, committed as the exchange completes. A replay
or a dry-run fork answers from the record and never sends; a request the record does not
hold, or one that differs, is refused. The libraries are patched once per process, and
only a thread (or task) inside :func:`recording` is affected: everything else — cairn's
own HTTP included — goes out as ever.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import importlib
import io
import time
import urllib.request
import urllib.response
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cairn.limits.departures import leave, leave_async
from cairn.recording.calls import ModelCalls, ModelRequest
from cairn.recording.scope import current, suspended

_installed = False


@dataclass(frozen=True)
class Exchange:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "headers": [list(pair) for pair in self.headers],
            "body_b64": base64.b64encode(self.body).decode(),
        }

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Exchange:
        return cls(
            int(data["status"]),
            str(data.get("reason", "")),
            [(str(k), str(v)) for k, v in data.get("headers", [])],
            base64.b64decode(data.get("body_b64", "")),
        )


def _request(method: str, url: str, headers: Mapping[str, str], body: bytes) -> ModelRequest:
    lowered = {k.lower(): v for k, v in headers.items()}
    params = {
        "url": url,
        "body_sha256": hashlib.sha256(body).hexdigest(),
        "content_type": lowered.get("content-type"),
    }
    return ModelRequest("http", method.upper(), url, params, {}, ())


def exchanged(
    method: str, url: str, headers: Mapping[str, str], body: bytes, send: Callable[[], Exchange]
) -> Exchange:
    """The response to a request a handler sends: recorded, or answered from the record."""
    calls = current.get()
    if calls is None:
        return send()
    request = _request(method, url, headers, body)
    if not calls.records_http:  # a replay of a node that records no HTTP: never sent
        return Exchange.of(calls.unrecorded(request))
    index = calls.take_index()
    answer = calls.recorded(index, request)
    if answer is not None:
        return Exchange.of(answer)
    started = time.perf_counter()
    with suspended():
        got = send()
    calls.record(index, request, got.to_dict(), time.perf_counter() - started)
    return got


async def exchanged_async(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    send: Callable[[], Awaitable[Exchange]],
) -> Exchange:
    """:func:`exchanged` for an async client: the record read and written off the loop."""
    calls = current.get()
    if calls is None:
        return await send()
    request = _request(method, url, headers, body)
    if not calls.records_http:  # a replay of a node that records no HTTP: never sent
        return Exchange.of(calls.unrecorded(request))
    index = calls.take_index()
    answer = await asyncio.to_thread(calls.recorded, index, request)
    if answer is not None:
        return Exchange.of(answer)
    started = time.perf_counter()
    token = current.set(None)
    try:
        got = await send()
    finally:
        current.reset(token)
    latency = time.perf_counter() - started
    await asyncio.to_thread(calls.record, index, request, got.to_dict(), latency)
    return got


# -- the libraries ------------------------------------------------------------------------


def install() -> None:
    """Patch httpx (and httpx2, the model SDKs' own), requests, urllib and aiohttp
    (once per process). Each patched send also tells a rate-limited model call that its
    request leaves (:mod:`cairn.limits.departures`)."""
    global _installed  # noqa: PLW0603 - patched once per process
    if _installed:
        return
    _installed = True
    for name in ("httpx", "httpx2"):
        _patch_httpx(name)
    _patch_requests()
    _patch_urllib()
    _patch_aiohttp()


def _patch_httpx(name: str) -> None:
    try:
        httpx = importlib.import_module(name)
    except ImportError:
        return
    sync_send = httpx.HTTPTransport.handle_request
    async_send = httpx.AsyncHTTPTransport.handle_async_request

    def handle_request(self: Any, request: Any) -> Any:
        leave()
        if current.get() is None:
            return sync_send(self, request)
        body = request.read()

        def send() -> Exchange:
            response = sync_send(self, request)
            try:
                content = response.read()
            finally:
                response.close()
            return Exchange(response.status_code, "", list(response.headers.multi_items()), content)

        got = exchanged(request.method, str(request.url), dict(request.headers), body, send)
        return httpx.Response(got.status, headers=got.headers, content=got.body, request=request)

    async def handle_async_request(self: Any, request: Any) -> Any:
        await leave_async()
        if current.get() is None:
            return await async_send(self, request)
        body = await request.aread()

        async def send() -> Exchange:
            response = await async_send(self, request)
            try:
                content = await response.aread()
            finally:
                await response.aclose()
            return Exchange(response.status_code, "", list(response.headers.multi_items()), content)

        got = await exchanged_async(
            request.method, str(request.url), dict(request.headers), body, send
        )
        return httpx.Response(got.status, headers=got.headers, content=got.body, request=request)

    httpx.HTTPTransport.handle_request = handle_request
    httpx.AsyncHTTPTransport.handle_async_request = handle_async_request


def _patch_requests() -> None:
    try:
        import requests  # noqa: PLC0415
        from requests.adapters import HTTPAdapter  # noqa: PLC0415
        from requests.structures import CaseInsensitiveDict  # noqa: PLC0415
        from requests.utils import get_encoding_from_headers  # noqa: PLC0415
    except ImportError:
        return
    original = HTTPAdapter.send

    def send_request(self: Any, request: Any, **kwargs: Any) -> Any:
        leave()
        if current.get() is None:
            return original(self, request, **kwargs)
        body = request.body or b""
        body = body.encode() if isinstance(body, str) else bytes(body)

        def send() -> Exchange:
            response = original(self, request, **kwargs)
            # requests has decoded the body already: the headers that described the wire
            # form would mislead a reader of the record.
            headers = [
                (k, v)
                for k, v in response.headers.items()
                if k.lower() not in {"content-encoding", "content-length", "transfer-encoding"}
            ]
            return Exchange(response.status_code, response.reason or "", headers, response.content)

        got = exchanged(request.method, request.url, dict(request.headers), body, send)
        response = requests.Response()
        response.status_code, response.reason = got.status, got.reason
        response.headers = CaseInsensitiveDict(got.headers)
        response._content = got.body
        response.url, response.request = request.url, request
        response.encoding = get_encoding_from_headers(response.headers)
        return response

    HTTPAdapter.send = send_request  # type: ignore[method-assign, assignment]


def _patch_urllib() -> None:
    original = urllib.request.AbstractHTTPHandler.do_open

    def do_open(self: Any, http_class: Any, req: Any, **http_conn_args: Any) -> Any:
        leave()
        if current.get() is None:
            return original(self, http_class, req, **http_conn_args)
        body = req.data or b""
        body = body.encode() if isinstance(body, str) else bytes(body)
        headers = {**dict(req.unredirected_hdrs), **dict(req.headers)}

        def send() -> Exchange:
            response = original(self, http_class, req, **http_conn_args)
            try:
                content = response.read()
            finally:
                response.close()
            return Exchange(
                response.status, response.reason, list(response.headers.items()), content
            )

        got = exchanged(req.get_method(), req.full_url, headers, body, send)
        raw = "".join(f"{k}: {v}\r\n" for k, v in got.headers).encode("latin-1") + b"\r\n"
        message = http.client.parse_headers(io.BytesIO(raw))
        result = urllib.response.addinfourl(io.BytesIO(got.body), message, req.full_url, got.status)
        result.msg = got.reason  # type: ignore[attr-defined]  # HTTPErrorProcessor reads it
        return result

    urllib.request.AbstractHTTPHandler.do_open = do_open  # type: ignore[method-assign]


def _patch_aiohttp() -> None:
    """aiohttp's requests are not recorded (its responses cannot be built again from a
    record): a live run sends them as ever; a replay refuses every one, never sent."""
    try:
        from aiohttp import ClientSession  # noqa: PLC0415
    except ImportError:
        return
    original = ClientSession._request

    async def request(self: Any, method: str, str_or_url: Any, **kwargs: Any) -> Any:
        calls = current.get()
        if calls is not None and not calls.live:
            calls.refuse(_request(method, str(str_or_url), {}, b""), "aiohttp is not recorded")
        await leave_async()
        return await original(self, method, str_or_url, **kwargs)

    ClientSession._request = request  # type: ignore[method-assign]


@contextmanager
def recording(calls: ModelCalls | None, patch: bool = True) -> Iterator[None]:
    """Record (or, in a replay, answer) the HTTP the block sends; a no-op for None."""
    if calls is None:
        yield
        return
    if patch:
        install()
    token = current.set(calls)
    try:
        yield
    finally:
        current.reset(token)
