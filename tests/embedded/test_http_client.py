"""The async HTTP client resuming a dropped stream, against httpx's mock transport: it
waits the reconnect delay the stream's ``retry:`` field asks for (a millisecond of real
time) and asks again from the last event id. The client without waiting:
tests/unit/test_http_client.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from cairn.http import AsyncClient
from tests.unit.test_http_client import FAST


def sse(*messages: tuple[str | None, str, dict[str, Any]]) -> bytes:
    lines = ["retry: 1", ""]
    for event_id, kind, data in messages:
        lines += ([f"id: {event_id}"] if event_id else []) + [
            f"event: {kind}",
            f"data: {json.dumps(data)}",
            "",
        ]
    return "\n".join(lines).encode() + b"\n"


class Dropping(httpx.AsyncByteStream):
    """A body that sends some bytes, then fails as a dropped connection does."""

    def __init__(self, sent: bytes) -> None:
        self.sent = sent

    async def __aiter__(self) -> Any:
        yield self.sent
        raise httpx.ReadError("connection reset")


def test_the_async_stream_resumes_after_a_drop_with_last_event_id() -> None:
    asked: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("Last-Event-ID"))
        headers = {"content-type": "text/event-stream"}
        if len(asked) == 1:
            body = sse(
                ("1", "run_started", {"seq": 1}), (None, "progress", {"seq": 1, "running": {}})
            )
            return httpx.Response(200, headers=headers, stream=Dropping(body))
        if len(asked) == 2:
            return httpx.Response(503)
        return httpx.Response(
            200,
            headers=headers,
            content=sse(
                ("2", "node_succeeded", {"seq": 2}),
                (None, "end", {"status": "succeeded", "last_seq": 2}),
            ),
        )

    async def follow() -> list[tuple[str, int | None]]:
        transport = httpx.MockTransport(handler)
        async with AsyncClient(
            "http://cairn.test", "k" * 16, retry=FAST, transport=transport
        ) as api:
            return [(event.type, event.seq) async for event in api.stream("r1")]

    events = asyncio.run(follow())
    assert events == [("run_started", 1), ("progress", None), ("node_succeeded", 2), ("end", None)]
    assert asked == [None, "1", "1"]
