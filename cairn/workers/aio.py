"""Async handlers: the worker process's event loop, and a coroutine running on it as the
worker thread that waits for it sees it.

Each worker process owns one event loop, on a thread of its own, started when the first
``async def`` handler arrives (after the fork, in a prefork child). A Celery worker hands
an async node to the loop whole and takes its next message (:mod:`cairn.workers.awaiting`):
no thread waits while it awaits. Elsewhere (the embedded mode, an ephemeral node, a cached
one) the thread that took the node hands the coroutine to the loop and waits for it. A
node's timeout, a run's cancel, or a join that no longer needs the node cancels the
coroutine at its current ``await`` (an open model stream is closed by the SDK as the
cancellation unwinds it), and its cleanup runs before the node's outcome is taken.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import threading
from collections.abc import Awaitable
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running the caller (an async handler's), if any: what must not be
    held by a blocking call."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class EventLoop:
    """An asyncio loop running forever on a daemon thread of this process."""

    _process: EventLoop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="cairn-async", daemon=True)
        self._thread.start()

    @classmethod
    def of_process(cls) -> EventLoop:
        """This process's loop, started on first use (a forked child starts its own: a
        parent's loop thread does not survive the fork)."""
        with cls._lock:
            current = cls._process
            if current is None or current.pid != os.getpid():
                current = cls._process = cls()
            return current

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self, awaitable: Awaitable[T]) -> Running[T]:
        """Run ``awaitable`` on the loop, in the caller's context (its context variables:
        what the worker set for the execution); the caller waits with :meth:`Running.wait`."""
        running: Running[T] = Running(self.loop)
        self.loop.call_soon_threadsafe(running._start, awaitable, contextvars.copy_context())
        return running

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` on the loop and wait for its result, uncancellable."""
        return self.start(awaitable).wait()


class Running(Generic[T]):
    """One coroutine on the loop. :meth:`cancel` may be called from any thread, before or
    after it started; :meth:`wait` returns what it returned, or raises what it raised —
    a coroutine ended by a cancel with a ``reason`` raises that reason instead of
    :class:`asyncio.CancelledError`; one that caught the cancel and returned is a
    return (its partial result kept)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task: asyncio.Task[T] | None = None
        self._ended = threading.Event()
        # For a waiter on the loop itself (:meth:`awaited`): set with ``_ended``.
        self._ended_here: asyncio.Future[None] | None = None
        self._reason: BaseException | None = None
        self._abandoned = False

    def _start(self, awaitable: Awaitable[T], context: contextvars.Context) -> None:
        if inspect.iscoroutine(awaitable):
            self._task = self._loop.create_task(awaitable, context=context)
        else:
            self._task = asyncio.ensure_future(awaitable, loop=self._loop)
        self._task.add_done_callback(lambda _task: self._end())
        if self._reason is not None:  # cancelled before it started
            self._task.cancel()

    def _end(self) -> None:
        """On the loop: the coroutine ended, or its waiter gave up on it."""
        self._ended.set()
        ended_here = self._ended_here
        if ended_here is not None and not ended_here.done():
            ended_here.set_result(None)

    def cancel(self, reason: BaseException) -> None:
        """Cancel the coroutine at its current ``await`` (once; the first reason
        stands)."""
        if self._reason is not None:
            return
        self._reason = reason
        self._loop.call_soon_threadsafe(self._cancel_task)

    def _cancel_task(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel(msg=str(self._reason))

    def abandon(self) -> None:
        """Stop waiting for a coroutine that outlived its grace period (it is left to
        the loop; nothing it does is committed)."""
        self._abandoned = True
        self._ended.set()
        self._loop.call_soon_threadsafe(self._end)

    def wait(self) -> T:
        self._ended.wait()
        return self._result()

    async def awaited(self) -> T:
        """:meth:`wait`, for a caller on the loop itself: awaits, holding no thread."""
        if not self._ended.is_set():
            self._ended_here = self._loop.create_future()
            if not self._ended.is_set():
                await self._ended_here
        return self._result()

    def _result(self) -> T:
        task = self._task
        if self._abandoned or task is None or not task.done():
            log.error("a coroutine did not end when cancelled (%s): left running", self._reason)
            raise self._reason or asyncio.CancelledError()
        if task.cancelled():
            raise self._reason or asyncio.CancelledError()
        return task.result()


class Coroutines:
    """What one execution runs on the loop (its on_resume check, then its handler), one
    at a time, cancelled together: a cancel before the next one starts cancels it too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: Running[Any] | None = None
        self._reason: BaseException | None = None

    def run(self, awaitable: Awaitable[T]) -> T:
        running = self._started(awaitable, here=False)
        try:
            return running.wait()
        finally:
            with self._lock:
                self._running = None

    async def run_here(self, awaitable: Awaitable[T]) -> T:
        """:meth:`run`, from a coroutine on this process's loop: awaited there, in the
        caller's context, holding no thread."""
        running = self._started(awaitable, here=True)
        try:
            return await running.awaited()
        finally:
            with self._lock:
                self._running = None

    def _started(self, awaitable: Awaitable[T], *, here: bool) -> Running[T]:
        with self._lock:
            if self._reason is not None:  # cancelled before it could start: never started
                if inspect.iscoroutine(awaitable):
                    awaitable.close()
                raise self._reason
            if here:
                running: Running[T] = Running(asyncio.get_running_loop())
                running._start(awaitable, contextvars.copy_context())
            else:
                running = EventLoop.of_process().start(awaitable)
            self._running = running
        return running

    def cancel(self, reason: BaseException) -> None:
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            running = self._running
        if running is not None:
            running.cancel(reason)

    def abandon(self) -> None:
        with self._lock:
            running = self._running
        if running is not None:
            running.abandon()
