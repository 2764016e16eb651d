"""Acks deferred until an awaited node is committed: the Celery consumer's half of
:mod:`cairn.workers.awaiting`.

Late acks, as for every node: a message is acknowledged once what it ran is committed.
A node task that handed its async node to its process's loop returns at once (its pool
slot is free), but its message is not acked then. The worker's main process — the one
that holds the messages and their prefetch window — keeps the request as *held*, widens
the window by one (as Celery does for a message it holds for its ETA), and acks the
message when the pool process says the node concluded, narrowing the window again.

The pool processes say so through one pipe, made by the main process before it forks
them: a line of JSON per node, short enough to be written whole by any of them at once.
The main process reads it on its event loop (or, with no loop, on a thread of its own),
so an ack goes out from where Celery's own acks do. A node that concluded with cairn's
own outage has its message given back (requeued), as a task that raised one would.

What is lost is found again: a pool process that dies with nodes awaiting has their
messages requeued (:meth:`DeferredAcks.sweep`; their leases lapse for the takeover), a
pipe full or gone loses an ack (the message is redelivered and found done), and a
worker killed outright leaves its held messages unacked, for the broker to redeliver
and the scheduler's recovery to find their leases lapsed. At a warm shutdown, what the
pool processes concluded as they ended is acked before the connection closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import threading
import time
from collections.abc import Iterable
from typing import Any

from celery import bootsteps
from celery.worker.state import task_ready

from cairn.reconnect import is_outage
from cairn.workers.awaiting import AwaitingNodes
from cairn.workers.failed import Failed
from cairn.workers.step.handled import Handled

log = logging.getLogger(__name__)

# Linux lets a pipe hold more than its default 64 KiB: room for the acks of every node
# pool processes conclude while the main process is not reading (a warm shutdown).
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
PIPE_BYTES = 1 << 20
# A line is written whole by one write when it is at most PIPE_BUF (4096 on Linux).
MAX_LINE = 4096
# An ack that arrives before its task's return is kept this long for it.
EARLY_KEPT_S = 120.0


_made: list[DeferredAcks] = []


def in_pool_process() -> None:
    """A pool process starts: the pipes it inherited, it only writes to."""
    for acks in _made:
        acks.in_pool_process()


class DeferredAcks:
    """The held requests of a worker's main process, and the pipe its pool processes say
    through which nodes concluded."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._write, F_SETPIPE_SZ, PIPE_BYTES)
        self.owner = os.getpid()
        self.consumer: Any = None
        self._lock = threading.Lock()
        self._held: dict[str, list[Any]] = {}
        # The prefetch window each held request widened (by the request's id): a consumer
        # rebuilt after a reconnect has a window of its own, which it must not narrow.
        self._widened: dict[int, Any] = {}
        self._early: dict[str, tuple[float, dict[str, Any]]] = {}
        self._partial = b""
        _made.append(self)

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ValueError):
            _made.remove(self)

    @property
    def fileno(self) -> int:
        return self._read

    @property
    def count(self) -> int:
        with self._lock:
            return sum(len(requests) for requests in self._held.values())

    # -- in the pool process that ran the node -------------------------------------------

    def in_pool_process(self) -> None:
        """A forked pool process only writes: its copy of the read end goes."""
        if os.getpid() != self.owner:
            with contextlib.suppress(OSError):
                os.close(self._read)

    def concluded(self, task_id: str, result: Handled | Failed | BaseException) -> None:
        """Say (to the main process) that the node of ``task_id`` concluded."""
        entry: dict[str, Any] = {"id": task_id}
        if isinstance(result, Handled):
            entry["handled"] = result.value
        elif isinstance(result, Failed):
            entry["failed"] = str(result)[:1000]
        else:
            entry["error"] = f"{type(result).__name__}: {result}"[:1000]
            entry["outage"] = is_outage(result)
        line = (json.dumps(entry) + "\n").encode()
        if len(line) > MAX_LINE:
            line = (json.dumps({"id": task_id, "error": "(too long to say)"}) + "\n").encode()
        try:
            os.write(self._write, line)
        except OSError as error:  # full, or the main process is gone
            log.warning("the ack of %s is lost (%s): found done when redelivered", task_id, error)

    # -- in the main process --------------------------------------------------------------

    def hold(self, request: Any) -> None:
        """``request``'s task handed its node over: keep its message unacked, and let the
        consumer take one more meanwhile."""
        with self._lock:
            early = self._early.pop(request.id, None)
            if early is None:
                self._held.setdefault(request.id, []).append(request)
        if self.consumer is not None:
            qos = self.consumer.qos
            qos.increment_eventually()
            with self._lock:
                self._widened[id(request)] = qos
        if early is not None:
            self._conclude(request, early[1])

    def readable(self) -> None:
        """Read what the pool processes said, and conclude those requests."""
        for entry in self._entries():
            task_id = str(entry.get("id"))
            with self._lock:
                requests = self._held.get(task_id)
                request = requests.pop(0) if requests else None
                if requests is not None and not requests:
                    del self._held[task_id]
                if request is None:  # before its task's return reached this process
                    self._early[task_id] = (time.monotonic(), entry)
            if request is not None:
                self._conclude(request, entry)

    def sweep(self) -> None:
        """Requeue the held messages of pool processes that died; forget acks that no
        held message came for."""
        self.readable()  # what a process said before it died counts
        with self._lock:
            lost = [
                request
                for requests in self._held.values()
                for request in requests
                if not _alive(request.worker_pid)
            ]
            for request in lost:
                self._held[request.id].remove(request)
                if not self._held[request.id]:
                    del self._held[request.id]
            old = time.monotonic() - EARLY_KEPT_S
            for task_id in [t for t, (at, _entry) in self._early.items() if at < old]:
                del self._early[task_id]
        for request in lost:
            log.warning(
                "the pool process awaiting %s died: its message goes back to the queue",
                request.id,
            )
            self._finish(request, requeue=True)

    def forget(self) -> list[Any]:
        """The connection is going: the held messages go back with it (the broker
        redelivers them; found done, or their leases lapsed, when they come back)."""
        with self._lock:
            held = [request for requests in self._held.values() for request in requests]
            self._held.clear()
            self._widened.clear()
        return held

    def _entries(self) -> Iterable[dict[str, Any]]:
        chunks = [self._partial]
        while True:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        *lines, self._partial = b"".join(chunks).split(b"\n")
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                log.warning("an unreadable ack line: %r", line[:200])
                continue
            if isinstance(entry, dict):
                yield entry

    def _conclude(self, request: Any, entry: dict[str, Any]) -> None:
        outage = bool(entry.get("outage"))
        self._finish(request, requeue=outage)
        runtime = time.monotonic() - request.time_start if request.time_start else 0.0
        if "handled" in entry:
            request.send_event("task-succeeded", result=repr(entry["handled"]), runtime=runtime)
        else:
            error = entry.get("failed") or entry.get("error") or "?"
            request.send_event("task-failed", exception=error, traceback="")

    def _finish(self, request: Any, *, requeue: bool) -> None:
        task_ready(request)
        try:
            if requeue:
                request.reject(requeue=True)
            else:
                request.acknowledge()
        finally:
            with self._lock:
                widened = self._widened.pop(id(request), None)
            if widened is not None and self.consumer is not None and self.consumer.qos is widened:
                widened.decrement_eventually()


def _alive(pid: int | None) -> bool:
    if pid is None or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Held(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer bootstep: the pipe made before the pool forks (the consumer is built
    first), read on the consumer's loop; the sweep; the acks of a warm shutdown."""

    label = "cairn deferred acks"
    requires = ("celery.worker.consumer.tasks:Tasks",)
    SWEEP_S = 1.0

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.acks = c.app.cairn_deferred = DeferredAcks()
        self._timer: Any = None
        self._reader: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self, c: Any) -> None:
        self.acks.consumer = c
        if c.hub is not None:
            c.hub.add_reader(self.acks.fileno, self._readable)
        elif self._reader is None:  # no event loop (a transport without one): a thread
            self._reader = threading.Thread(
                target=self._read_forever, name="cairn-deferred-acks", daemon=True
            )
            self._reader.start()
        self._timer = c.timer.call_repeatedly(self.SWEEP_S, self._sweep)

    def stop(self, c: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if c.hub is not None:
            c.hub.remove_reader(self.acks.fileno)

    def shutdown(self, c: Any) -> None:
        """The pool has stopped (its processes waited for their awaiting nodes): ack what
        they concluded while the connection is still open."""
        self.stop(c)
        self._stopping.set()
        here = AwaitingNodes.in_process()  # a threads or solo pool awaits in this process
        if here is not None:
            here.drain()
        self.acks.readable()
        left = self.acks.forget()
        if left:
            log.warning(
                "%d awaiting nodes did not say they concluded: their messages go back "
                "to the queue (found done, or their leases lapsed, when redelivered)",
                len(left),
            )

    def _sweep(self) -> None:
        try:
            self.acks.sweep()
        except Exception:  # a timer callback that raises would stop the worker's loop
            log.warning("sweeping the held node messages failed", exc_info=True)

    def _readable(self) -> None:
        try:
            self.acks.readable()
        except Exception:  # as for the timer: nothing may reach the worker's loop
            log.warning("reading the deferred acks failed", exc_info=True)

    def _read_forever(self) -> None:
        while not self._stopping.is_set():
            readable, _, _ = select.select([self.acks.fileno], [], [], 1.0)
            if readable:
                self._readable()
