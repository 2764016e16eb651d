"""Async nodes that hold no worker: a worker process's async nodes, awaited on its loop.

A Celery worker's pool slot (a prefork process, a thread) takes a node message and runs
its first stages — read, admit, hold — as for any node. When the node's handler is
``async def`` (and the node durable: :func:`cairn.workers.step.execute.awaitable`), the
slot equips it, gives it its context, and hands it to this process's event loop whole;
the task returns and the slot takes its next message. On the loop the handler is awaited
with no thread waiting for it, under its lease, its heartbeat (the process's heartbeat
thread renews every lease it holds), its timeout and its cancel, as ever. When it ends, a
thread of :class:`AwaitingNodes` concludes it — its circuits told, the commit with the
lease and the fence checked, the release — and only then is its message acknowledged
(:mod:`cairn.workers.deferred`): a worker killed meanwhile leaves the message unacked,
and the lease lapses for recovery to find, as for any node it was running.

At most ``CAIRN_ASYNC_NODES`` nodes await in one process: past it, the slot that holds
the next one waits for a place (the process is full; its slots stop taking messages).
A process that stops — a warm shutdown — waits for the nodes awaiting in it to conclude
before it ends (:meth:`AwaitingNodes.drain`)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from cairn.engine.optimistic import Completion
from cairn.model.definition import ErrorClass
from cairn.observe.sentry import report_failure
from cairn.reconnect import is_outage
from cairn.workers.aio import EventLoop
from cairn.workers.failed import Failed
from cairn.workers.step.commit import commit
from cairn.workers.step.execute import Awaitable, Ran, execute_awaited
from cairn.workers.step.handled import Handled
from cairn.workers.step.hold import Held
from cairn.workers.step.release import release, settle

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner

log = logging.getLogger(__name__)

T = TypeVar("T")

# What concludes the nodes of a process (a commit and a release each, a few ms): a few
# threads, so that many nodes ending together do not wait in line for one.
CONCLUDING_THREADS = 4

Concluded = Callable[[Handled | Failed | BaseException], None]


class AwaitingNodes:
    """The async nodes awaiting on this process's loop, at most ``limit`` at once."""

    _process: AwaitingNodes | None = None
    _lock = threading.Lock()

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("AwaitingNodes needs a limit of at least one node")
        self.limit = limit
        self.pid = os.getpid()
        self._places = threading.BoundedSemaphore(limit)
        self._threads = ThreadPoolExecutor(CONCLUDING_THREADS, thread_name_prefix="cairn-conclude")
        self._idle = threading.Condition()
        self._count = 0

    @classmethod
    def of_process(cls, limit: int) -> AwaitingNodes:
        """This process's, made on first use (a forked child makes its own)."""
        with cls._lock:
            current = cls._process
            if current is None or current.pid != os.getpid():
                current = cls._process = cls(limit)
            return current

    @classmethod
    def in_process(cls) -> AwaitingNodes | None:
        current = cls._process
        return current if current is not None and current.pid == os.getpid() else None

    @property
    def count(self) -> int:
        with self._idle:
            return self._count

    def hand_over(self, runner: NodeRunner, ready: Awaitable, concluded: Concluded) -> None:
        """Await ``ready`` on the loop, then conclude it and say how it ended to
        ``concluded`` (from a thread of this process). Waits for a place when ``limit``
        nodes await already. What it holds (lease, heartbeat, slots) is the loop's from
        here: nothing the caller does afterwards releases it."""
        self._places.acquire()
        with self._idle:
            self._count += 1
        try:
            EventLoop.of_process().start(self._awaited(runner, ready, concluded))
        except BaseException:
            self._ended()
            raise

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until no node awaits here (False: some still did at ``timeout_s``)."""
        with self._idle:
            if self._count:
                log.info("waiting for %d awaiting async nodes to conclude", self._count)
            return self._idle.wait_for(lambda: self._count == 0, timeout_s)

    async def _awaited(self, runner: NodeRunner, ready: Awaitable, concluded: Concluded) -> None:
        held = ready.held
        result: Handled | Failed | BaseException
        try:
            try:
                ran = await execute_awaited(runner, ready)
            except BaseException:
                await self._in_thread(release, runner, held, None, None)
                raise
            result = await self._in_thread(conclude, runner, held, ran)
        except BaseException as error:  # cairn's own failure, as a task's would be
            if not is_outage(error) and isinstance(error, Exception):
                report_failure(error, ErrorClass.PERMANENT)
            log.error("%s: concluding the awaited node failed", held.message.key, exc_info=True)
            result = error
        try:
            concluded(result)
        except Exception:  # its message is redelivered, and found done
            log.warning("%s: could not say how it ended", held.message.key, exc_info=True)
        finally:
            self._ended()

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a concluding thread, in this coroutine's context (its node's
        log tags)."""
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, lambda: context.run(fn, *args))

    def _ended(self) -> None:
        self._places.release()
        with self._idle:
            self._count -= 1
            if self._count == 0:
                self._idle.notify_all()


def conclude(runner: NodeRunner, held: Held, ran: Ran) -> Handled | Failed:
    """After the await, as after any execution: its circuits told, then commit → release
    (:meth:`cairn.workers.runner.NodeRunner.step`)."""
    message, outcome = ran.steps[0]
    guarded = held.admitted.guarded
    if runner.circuits is not None and guarded is not None:
        runner.circuits.report(message, guarded, outcome)
    completion: Completion | Handled | None = None
    try:
        completion = commit(runner, held, ran)
    finally:
        release(runner, held, ran, completion)
    return settle(runner, held, ran, completion)
