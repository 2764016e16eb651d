"""The unit suite: tests that run on the test's own thread, wait for nothing and start
no thread of cairn's — the decider, the definitions, the engine and the scheduler stepped
by hand over SQLite. A test that needs the embedded runtime's threads, or real time to
pass, belongs in tests/embedded; the guard below fails one that tries. The fixtures both
suites use are in tests/support/in_process.py."""

from __future__ import annotations

import asyncio
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from cairn.definitions.loader import load_file
from cairn.model.definition import WorkflowDefinition
from tests.support.in_process import (
    EXAMPLES,
    _empty_sqlite_migrates_from_the_template,
    _shared_workflows_parsed_once,
    migrated,
    store,
    wall_clock,
)

__all__ = [
    "_empty_sqlite_migrates_from_the_template",
    "_shared_workflows_parsed_once",
    "migrated",
    "store",
    "wall_clock",
]

ELSEWHERE = "tests/embedded"
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()
# Wrappers of the standard library's thread starting, looked through as it is: Sentry's
# threading integration (installed by the first init_sentry in a process, for good) wraps
# Thread.start and ThreadPoolExecutor.submit.
_WRAPPERS = ("sentry_sdk.integrations.threading",)


@pytest.fixture(scope="session")
def flight() -> WorkflowDefinition:
    return load_file(EXAMPLES / "book_flight.yaml")


def _whose(frame: FrameType) -> str:
    """``"cairn"`` (cairn's code, the tests', the examples', a handler loaded from a
    file), ``"library"`` (an installed third-party package) or ``"stdlib"`` (the standard
    library, or a wrapper of it)."""
    module = str(frame.f_globals.get("__name__", ""))
    if module == "cairn" or module.startswith("cairn."):
        return "cairn"
    if module in _WRAPPERS:
        return "stdlib"
    filename = frame.f_code.co_filename
    parts = Path(filename).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return "library"
    if filename.startswith("<frozen ") or Path(filename).resolve().is_relative_to(_STDLIB):
        return "stdlib"
    return "cairn"


def started_by(thread: threading.Thread, frame: FrameType | None) -> tuple[str, str]:
    """Who asked for ``thread``, whose ``start()`` was called from ``frame``: walking out,
    the first frame neither the standard library's nor one of the thread's own ``start``
    methods (a subclass's, or a wrapper such as Sentry's threading integration) —
    ``("library", where)`` if a third-party package's, else ``("cairn", where)``: cairn's
    code or the test's, or none (a thread a standard-library server started)."""
    while frame is not None:
        whose = _whose(frame)
        if whose != "stdlib" and frame.f_locals.get("self") is not thread:
            return whose, f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "cairn", "the standard library alone"


@dataclass
class Guard:
    """What the guard caught in the running test, one message a sleep or a thread; and
    the threads it let a library start, whose calls it watches as the test's own."""

    test_thread: int
    caught: list[str] = field(default_factory=list)
    allowed: weakref.WeakSet[threading.Thread] = field(default_factory=weakref.WeakSet)

    def watches(self) -> bool:
        """The call is the test's: on its thread, or on a thread started while it ran (not
        one left over from another suite's test in this process)."""
        return (
            threading.get_ident() == self.test_thread or threading.current_thread() in self.allowed
        )

    def refuse(self, what: str) -> None:
        message = f"{what}: a unit test may not — it belongs in {ELSEWHERE}"
        self.caught.append(message)
        pytest.fail(message, pytrace=False)


@contextmanager
def guarding(guard: Guard) -> Iterator[Guard]:
    sleep, start, asleep = time.sleep, threading.Thread.start, asyncio.sleep

    def guarded_sleep(seconds: float) -> None:
        if seconds > 0 and guard.watches():
            guard.refuse(f"time.sleep({seconds!r}) waits on the wall clock")
        sleep(seconds)

    async def guarded_asleep(delay: float, result: Any = None) -> Any:
        if delay > 0 and threading.get_ident() == guard.test_thread:
            guard.refuse(f"asyncio.sleep({delay!r}) waits on the wall clock")
        return await asleep(delay, result)

    def guarded_start(thread: threading.Thread) -> None:
        if guard.watches():
            whose, where = started_by(thread, sys._getframe(1))
            if whose != "library":
                guard.refuse(f"thread {thread.name!r} started from {where} is a worker thread")
            guard.allowed.add(thread)
        start(thread)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "sleep", guarded_sleep)
        patch.setattr(asyncio, "sleep", guarded_asleep)
        patch.setattr(threading.Thread, "start", guarded_start)
        yield guard


@pytest.fixture(scope="package", autouse=True)
def _unit_guard() -> Iterator[Guard]:
    """No unit test sleeps or starts a worker thread. While tests/unit's tests run (their
    fixtures of every scope included) these fail the test at once, naming the call:

    - ``time.sleep`` with a positive duration;
    - ``asyncio.sleep`` with a positive duration on the test's own thread (a coroutine the
      test runs with ``asyncio.run``). A task on another thread's loop is not the test's
      wait: TestClient's portal loop runs the API's stream watcher, which polls;
    - starting a worker thread: any thread that cairn's code or the test's asks for —
      ``threading.Thread``, a ``ThreadPoolExecutor``'s, ``asyncio.to_thread`` and
      ``run_in_executor``, a ``socketserver`` thread per request — that is, walking out
      from ``Thread.start``, the first frame that is neither the standard library's nor
      the thread's own ``start`` (a subclass's, or a wrapper such as Sentry's) is not an
      installed third-party package's. So the embedded runtime's workers and broker, the
      scheduler, the notifier and its pool, heartbeats, deadline watchers, the build
      announcer, the async-handler loop and the model stand-in's server are all refused.

    A thread a third-party library starts for its own machinery is allowed: starlette's
    TestClient drives the app on an anyio blocking portal and anyio's worker threads, the
    test's thread waiting on each request. What such a thread does is watched as the
    test's own (its sleeps, the threads it starts); a thread left over from another
    suite's test in this process is not the test's, and is not watched."""
    with guarding(Guard(test_thread=threading.get_ident())) as guard:
        yield guard


@pytest.fixture(autouse=True)
def no_sleeps_or_worker_threads(
    _unit_guard: Guard, request: pytest.FixtureRequest
) -> Iterator[Guard]:
    """The guard of this test; after it, a sleep or thread the guard refused and the
    code swallowed fails the test all the same."""
    _unit_guard.caught.clear()
    yield _unit_guard
    caught, _unit_guard.caught[:] = list(_unit_guard.caught), []
    reports = (getattr(request.node, f"rep_{when}", None) for when in ("setup", "call"))
    if caught and not any(report is not None and report.failed for report in reports):
        pytest.fail("; ".join(caught), pytrace=False)
