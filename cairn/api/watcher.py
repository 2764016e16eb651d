"""The API process's one watcher of the runs its open streams follow: streams wait on it
without a thread, so one process serves thousands of them.

Every ``POLL_S`` one read gets the heads of *all* watched runs (an indexed lookup by id)
and, for the runs that moved, their new events (one read on the ``(run_id, seq)`` key),
then the heartbeats of the runs' running nodes (one Redis round trip); it hands each
stream what is new for it and wakes only those streams. A second task waits on the
runs' chunk logs (one blocking ``XREAD`` over all of them, on an event loop connection)
and wakes the streams of the runs whose model calls said something. A stream that ends
or whose client goes away releases its watch; the run is no longer read once nobody
follows it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from cairn.lease.chunk_log import ChunkLog, chunk_log
from cairn.lease.heartbeat import beat_view
from cairn.model.keys import lease_key
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.records import EventRecord, RunHead

log = logging.getLogger(__name__)

POLL_S = 0.25  # a new event reaches its streams within this (plus one read)
CHUNK_WAIT_S = 0.1  # a newly followed chunk log is waited on within this
EVENTS_PER_POLL = 500  # the most events of one run handed over per poll (a long catch-up)
RETRY_S = 1.0  # after a failed poll (the database away), before the next


@dataclass(eq=False)
class Watch:
    """One open stream's interest in a run, and what the watcher has handed it since it
    last looked: events after ``seq``, the run's head, its running nodes' heartbeats."""

    run_id: str
    seq: int  # the last event handed over
    chunks: bool  # the stream follows the run's chunk log too
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    events: list[EventRecord] = field(default_factory=list)
    head: RunHead | None = None
    polled: bool = False  # the head has been read (None then: the run is gone)
    running: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunks_grew: bool = False

    async def wait(self, timeout_s: float) -> None:
        """Until the watcher has something new for this stream, or ``timeout_s``."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self.woken.wait(), timeout_s)
        self.woken.clear()

    def take_events(self) -> list[EventRecord]:
        taken, self.events = self.events, []
        return taken


class RunWatcher:
    def __init__(
        self, runtime: Runtime, poll_s: float = POLL_S, chunk_wait_s: float = CHUNK_WAIT_S
    ) -> None:
        self.runtime = runtime
        self.poll_s, self.chunk_wait_s = poll_s, chunk_wait_s
        self.chunk_log: ChunkLog = chunk_log(runtime.leases)
        self._watches: dict[str, set[Watch]] = {}
        self._progress: dict[str, dict[str, Any]] = {}  # run -> what its nodes last reported
        self._chunk_after: dict[str, str] = {}  # run -> the newest chunk id seen
        self._joined = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._poll_forever(), name="cairn-run-watcher"),
            asyncio.create_task(self._chunks_forever(), name="cairn-chunk-watcher"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError):
                await task
        await self.chunk_log.close()

    @property
    def count(self) -> int:
        """Open watches (streams) on this process."""
        return sum(len(watches) for watches in self._watches.values())

    def watch(self, run_id: str, seq: int, *, chunks: bool) -> Watch:
        """Follow ``run_id`` from after ``seq``: its first poll comes at once."""
        watch = Watch(run_id, seq, chunks)
        self._watches.setdefault(run_id, set()).add(watch)
        self._joined.set()
        return watch

    def follow_chunks(self, watch: Watch, after: str) -> None:
        """Wake ``watch`` when the run's chunk log grows past ``after`` (or past what
        another stream of the run has already been woken for)."""
        self._chunk_after.setdefault(watch.run_id, after)

    def release(self, watch: Watch) -> None:
        watches = self._watches.get(watch.run_id)
        if watches is None:
            return
        watches.discard(watch)
        if not watches:
            del self._watches[watch.run_id]
            self._progress.pop(watch.run_id, None)
            self._chunk_after.pop(watch.run_id, None)
        elif not any(other.chunks for other in watches):
            self._chunk_after.pop(watch.run_id, None)

    async def _poll_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            self._joined.clear()
            try:
                await self._poll()
            except Exception:  # the database or Redis away: streams wait, and we retry
                log.exception("polling the watched runs failed")
                await asyncio.sleep(RETRY_S)
            with suppress(TimeoutError):
                left = self.poll_s - (loop.time() - started)
                await asyncio.wait_for(self._joined.wait(), max(0.0, left))

    async def _poll(self) -> None:
        after = {run_id: min(w.seq for w in watches) for run_id, watches in self._watches.items()}
        if not after:
            return
        heads, events, beats = await run_in_threadpool(self._read, after)
        for run_id, read_after in after.items():
            if run_id not in self._watches:
                continue  # nobody follows it any more
            head, running = heads.get(run_id), beats.get(run_id, {})
            progress = {  # what changes it, not the beat's age
                label: {k: v for k, v in beat.items() if k not in ("age_s", "eta_s")}
                for label, beat in running.items()
            }
            progressed = progress != self._progress.get(run_id, {})
            self._progress[run_id] = progress
            ended = head is None or head.status.terminal
            for watch in self._watches[run_id]:
                if watch.seq < read_after:
                    continue  # joined during the read, from further back: the next poll's
                new = [event for event in events.get(run_id, ()) if event.seq > watch.seq]
                if new:
                    watch.events.extend(new)
                    watch.seq = new[-1].seq
                if new or progressed or ended or not watch.polled:
                    watch.head, watch.running, watch.polled = head, running, True
                    watch.woken.set()

    def _read(
        self, after: Mapping[str, int]
    ) -> tuple[dict[str, RunHead], dict[str, list[EventRecord]], dict[str, dict[str, Any]]]:
        """The runs' heads, the new events of those that moved, and what their running
        nodes report (on a pool thread, one for the whole process: two database reads
        and one Redis round trip, however many runs are followed)."""
        # Heads first: a head that says the run ended at seq N is read before the events,
        # so these include N, and no stream ends before sending its last event.
        with self.runtime.store.reading() as tx:
            heads = tx.run_heads(list(after))
            moved = {
                run_id: seq
                for run_id, seq in after.items()
                if run_id in heads and heads[run_id].last_seq > seq
            }
            events = tx.events_of_runs(moved, EVENTS_PER_POLL)
        running = [
            (run_id, node, int(iteration))
            for run_id, head in heads.items()
            # A waiting run only waits for people: none of its nodes is running.
            if not head.status.terminal and head.status is not RunStatus.WAITING
            for node, _, iteration in (e.rpartition("#") for e in head.current or ())
        ]
        keys = [lease_key(*where, "run") for where in running]
        records = self.runtime.leases.beats(keys) if keys else []
        beats: dict[str, dict[str, Any]] = {run_id: {} for run_id in heads}
        for (run_id, node, iteration), beat in zip(running, records, strict=True):
            if beat:
                beats[run_id][f"{node}#{iteration}"] = beat_view(beat)
        return heads, events, beats

    async def _chunks_forever(self) -> None:
        while True:
            try:
                grown = await self.chunk_log.grown(dict(self._chunk_after), self.chunk_wait_s)
            except Exception:  # Redis away: what models say is not kept; streams go on
                log.exception("waiting on the watched runs' chunk logs failed")
                await asyncio.sleep(RETRY_S)
                continue
            for run_id, newest in grown.items():
                if run_id not in self._chunk_after:
                    continue  # nobody follows it any more
                self._chunk_after[run_id] = newest
                for watch in self._watches.get(run_id, ()):
                    if watch.chunks:
                        watch.chunks_grew = True
                        watch.woken.set()
