"""The unit suite's guard (tests/unit/conftest.py): a unit test that sleeps, awaits a
sleep or starts a worker thread fails at once, told where it belongs; a zero sleep and a
library's own thread pass, what that thread runs watched as the test's. Each test here
clears what it made the guard catch, or the guard would fail it after all."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from anyio.from_thread import start_blocking_portal

from tests.unit.conftest import Guard

REFUSED = "a unit test may not — it belongs in tests/embedded"


def test_every_unit_test_is_guarded(request: pytest.FixtureRequest) -> None:
    assert "no_sleeps_or_worker_threads" in request.fixturenames


def test_a_sleep_fails_the_test(no_sleeps_or_worker_threads: Guard) -> None:
    with pytest.raises(pytest.fail.Exception, match=REFUSED):
        time.sleep(0.001)
    time.sleep(0)  # no wait: passes
    assert no_sleeps_or_worker_threads.caught == [
        f"time.sleep(0.001) waits on the wall clock: {REFUSED}"
    ]
    no_sleeps_or_worker_threads.caught.clear()


def test_an_awaited_sleep_fails_the_test(no_sleeps_or_worker_threads: Guard) -> None:
    async def waits(seconds: float) -> None:
        await asyncio.sleep(seconds)

    asyncio.run(waits(0))  # a yield to the loop, no wait: passes
    with pytest.raises(pytest.fail.Exception, match=r"asyncio\.sleep\(0\.001\)"):
        asyncio.run(waits(0.001))
    assert len(no_sleeps_or_worker_threads.caught) == 1
    no_sleeps_or_worker_threads.caught.clear()


def test_a_thread_of_the_tests_or_of_cairns_fails_the_test(
    no_sleeps_or_worker_threads: Guard,
) -> None:
    ran: list[int] = []
    thread = threading.Thread(target=ran.append, args=(1,), name="mine")
    with pytest.raises(pytest.fail.Exception, match=f"thread 'mine' started from {__file__}"):
        thread.start()
    pool = ThreadPoolExecutor(1)  # a pool's thread, started by the standard library for us
    with pytest.raises(pytest.fail.Exception, match=REFUSED):
        pool.submit(ran.append, 2)
    pool.shutdown(wait=False, cancel_futures=True)
    assert ran == [] and len(no_sleeps_or_worker_threads.caught) == 2
    no_sleeps_or_worker_threads.caught.clear()


def test_a_thread_asked_of_asyncio_fails_the_test(no_sleeps_or_worker_threads: Guard) -> None:
    async def offloaded() -> None:
        await asyncio.to_thread(print, "never")

    with pytest.raises(pytest.fail.Exception, match=REFUSED):
        asyncio.run(offloaded())
    assert no_sleeps_or_worker_threads.caught
    no_sleeps_or_worker_threads.caught.clear()


def test_a_refusal_swallowed_is_still_caught(no_sleeps_or_worker_threads: Guard) -> None:
    with contextlib.suppress(BaseException):  # what careless code might do
        time.sleep(0.001)
    assert len(no_sleeps_or_worker_threads.caught) == 1  # so the test fails at teardown
    no_sleeps_or_worker_threads.caught.clear()


def test_a_librarys_own_thread_passes_and_is_watched(no_sleeps_or_worker_threads: Guard) -> None:
    """anyio's blocking portal, as starlette's TestClient starts it to drive an app: its
    thread is allowed, and a sleep on it is the test's."""
    with start_blocking_portal() as portal:
        assert portal.call(asyncio.sleep, 0) is None
        assert no_sleeps_or_worker_threads.caught == []
        with pytest.raises(pytest.fail.Exception, match=REFUSED):
            portal.call(time.sleep, 0.001)
    assert len(no_sleeps_or_worker_threads.caught) == 1
    no_sleeps_or_worker_threads.caught.clear()
