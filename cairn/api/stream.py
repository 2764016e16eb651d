"""``GET /v1/runs/{id}/stream``: the run's events as Server-Sent Events, as they are
appended, until the run ends — and between them, the progress its running nodes report
through their heartbeats.

A stream holds no thread while it waits: it registers a watch with the process's one
:class:`~cairn.api.watcher.RunWatcher`, which polls the heads of every watched run in
one read, reads the new events of the runs that moved, and wakes only their streams.
PostgreSQL is polled rather than listened to because it is the only place every process
writes: it is the one source any API replica can follow, and a stream missed by no
notification. Each event carries ``id: <seq>``; a client that lost the connection
reconnects with ``Last-Event-ID`` (browsers' EventSource do so by themselves) and gets
exactly the events after it. A client that goes away releases its watch.

Progress (``event: progress``) is sent whenever what a running node reports changes
(its ``ctx.progress``, its worker): it carries no ``id``, so a reconnect resumes after
the last *event*, and progress is simply read afresh. It comes from the heartbeat
records in Redis, which may be lost; the events never are.

What streaming model calls say (``event: chunk``: node, iteration, attempt, call, offset,
text; ``done`` on a call's last) is sent as it arrives, from the run's chunk log in Redis
(the watcher waits on every followed run's log at once; a woken stream reads its own
from where it is). Once a chunk has been sent, every ``id`` is ``<seq>:<chunk id>``, so
a reconnect resumes both exactly. A chunk of an
attempt older than one seen for its node — already, or in the same read — is marked
``superseded``: its call was cut short, and the newer attempt's text replaces it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from cairn.api.access import Reader
from cairn.api.models import MAX_INT
from cairn.api.redact import event_for
from cairn.api.run_views import event_dict
from cairn.api.scope import ERRORS, RunId, head_in
from cairn.api.watcher import RunWatcher, Watch
from cairn.lease.chunk_log import ChunkLog, Chunks
from cairn.lease.port import CHUNKS_PER_READ
from cairn.model.principals import Permission
from cairn.runtime import Runtime

router = APIRouter(prefix="/v1")

KEEPALIVE_S = 15.0  # a comment line, so that proxies do not close a quiet stream
RETRY_MS = 1000  # how soon an EventSource reconnects after a drop


@router.get(
    "/runs/{run_id}/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "text/event-stream: `id: <seq>`, `event: <type>`, `data: <event "
            "JSON>` per event; a last `event: end` with the final status.",
            "content": {"text/event-stream": {}},
        },
        **ERRORS,
    },
)
async def stream_run(
    run_id: RunId,
    request: Request,
    who: Reader,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_INT, description="Start after this seq.")
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            pattern=r"^[0-9]{1,10}(:[0-9]{1,20}-[0-9]{1,10})?$",
            description="Resume after this id (reconnects): a seq, or seq:chunk id.",
        ),
    ] = None,
) -> StreamingResponse:
    runtime: Runtime = request.app.state.runtime
    await run_in_threadpool(head_in, runtime, run_id, who.namespace)  # 404 before any byte
    seq_text, _, chunk_after = (last_event_id or "").partition(":")
    start = int(seq_text) if seq_text else (after or 0)
    payloads = who.may(Permission.PAYLOADS)
    return StreamingResponse(
        _events(
            request.app.state.watcher,
            run_id,
            min(start, MAX_INT),
            request,
            chunk_after or "0",
            payloads,
        ),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(  # noqa: PLR0917 - the stream's parameters, as the endpoint read them
    watcher: RunWatcher,
    run_id: str,
    seq: int,
    request: Request,
    chunk_after: str = "0",
    payloads: bool = True,
) -> AsyncIterator[str]:
    """The stream; ``payloads`` False: events without their payload fields, progress
    without its messages, and none of the model's streamed text."""
    watch = watcher.watch(run_id, seq, chunks=payloads)
    try:
        yield f"retry: {RETRY_MS}\n\n"
        feed = _ChunkFeed(watcher.chunk_log, run_id, chunk_after, payloads)
        first = True
        sent_at = time.monotonic()
        reported: dict[str, Any] | None = None
        while True:
            await watch.wait(max(0.0, KEEPALIVE_S - (time.monotonic() - sent_at)))
            messages, reported = _news(watch, feed, seq, reported, payloads)
            seq = watch.seq
            head = watch.head
            ended = watch.polled and (
                head is None or (head.status.terminal and seq >= head.last_seq)
            )
            if first or watch.chunks_grew or ended:  # what the run's model calls said
                watch.chunks_grew = False
                if first:
                    watcher.follow_chunks(watch, feed.after)
                messages += await feed.read(seq)
                first = False
            if head is not None and ended:
                end = {"status": head.status, "last_seq": seq}
                messages.append(f"event: end\ndata: {json.dumps(end)}\n\n")
            if not messages and time.monotonic() - sent_at >= KEEPALIVE_S:
                messages.append(": keepalive\n\n")
            if messages:
                yield "".join(messages)
                sent_at = time.monotonic()
            if ended or await request.is_disconnected():
                return
    finally:
        watcher.release(watch)


def _news(
    watch: Watch,
    feed: _ChunkFeed,
    seq: int,
    reported: dict[str, Any] | None,
    payloads: bool,
) -> tuple[list[str], dict[str, Any] | None]:
    """The events the watcher handed over, formatted, and the progress of the run's
    running nodes when it changed; and the progress now reported."""
    messages = []
    for row in watch.take_events():
        seq = row.seq
        messages.append(
            _format(_id(seq, feed.after), row.type, event_for(event_dict(row), payloads))
        )
    running = watch.running
    if not payloads:
        running = {label: {**beat, "message": None} for label, beat in running.items()}
    progress = {  # what changes it, not the beat's age
        execution: {k: v for k, v in beat.items() if k not in ("age_s", "eta_s")}
        for execution, beat in running.items()
    }
    if progress and progress != reported:
        data = {"seq": seq, "running": running}
        messages.append(f"event: progress\ndata: {json.dumps(data, separators=(',', ':'))}\n\n")
    return messages, progress


class _ChunkFeed:
    """The run's chunk log as the stream reads it: where it is, and the newest attempt it
    has seen of each node (to mark an older attempt's chunks superseded)."""

    def __init__(self, chunks: ChunkLog, run_id: str, after: str, payloads: bool = True) -> None:
        self.chunks, self.run_id, self.after = chunks, run_id, after
        self.newest: dict[tuple[str, int], int] = {}
        self.payloads = payloads

    async def read(self, seq: int) -> list[str]:
        """The chunks after the last one sent, formatted; none for a reader that may not
        read payloads."""
        if not self.payloads:
            return []
        messages = []
        while True:
            chunks = await self.chunks.read(self.run_id, self.after)
            messages += self._formatted(seq, chunks)
            if len(chunks) < CHUNKS_PER_READ:
                return messages

    def _formatted(self, seq: int, chunks: Chunks) -> list[str]:
        for _chunk_id, chunk in chunks:  # the newest attempt of each node, first
            where = (str(chunk.get("node")), int(chunk.get("iteration", 1)))
            attempt = int(chunk.get("attempt", 1))
            self.newest[where] = max(self.newest.get(where, attempt), attempt)
        messages = []
        for chunk_id, chunk in chunks:
            self.after = chunk_id
            where = (str(chunk.get("node")), int(chunk.get("iteration", 1)))
            data = {**chunk, "superseded": int(chunk.get("attempt", 1)) < self.newest[where]}
            messages.append(_format(_id(seq, self.after), "chunk", data))
        return messages


def _id(seq: int, chunk_after: str) -> str:
    """An event's SSE id: its seq — with the last chunk sent, once there is one."""
    return str(seq) if chunk_after == "0" else f"{seq}:{chunk_after}"


def _format(event_id: str, kind: str, data: dict[str, Any]) -> str:
    # json.dumps escapes newlines, so the data is one line, as SSE requires.
    return f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
