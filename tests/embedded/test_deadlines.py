"""Holding a handler to its node's timeout, in this process: a blocked call in the main
thread is interrupted; one on another thread is told to stop and, past its grace
period, left behind without its lease. (The prefork child ending itself is proven with
real worker processes in tests/acceptance/test_deadlines.py.)"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cairn.lease.heartbeat import Beat, Heartbeats
from cairn.lease.memory import MemoryLeases
from cairn.model.failures import DeadlineExceeded
from cairn.model.keys import lease_key
from cairn.workers import deadlines
from cairn.workers.deadlines import limited

KEY = lease_key("r", "ask", 1, "run")


def held() -> tuple[Heartbeats, Beat]:
    """A lease held in memory, and its beat (renewed every 10 s: no renewal in a test)."""
    leases = MemoryLeases()
    lease = leases.acquire(KEY, 30)
    assert lease is not None
    heartbeats = Heartbeats(leases)
    return heartbeats, heartbeats.hold(lease, interval_s=10)


def test_a_call_blocked_in_the_main_thread_is_interrupted_at_the_timeout() -> None:
    heartbeats, beat = held()
    given_up: list[bool] = []
    started = time.monotonic()
    with (
        pytest.raises(DeadlineExceeded, match=r"ask timed out after 0\.3 s"),
        limited(heartbeats, beat, 0.3, 5.0, what="ask", give_up=lambda: given_up.append(True)),
    ):
        time.sleep(10)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 2.0, elapsed
    assert beat.timed_out.is_set() and beat.cancelled.is_set()  # ctx.cancelled, too
    assert not given_up and not beat.lost.is_set()  # stopped within its grace period


def test_a_handler_cannot_swallow_its_deadline_with_except_exception() -> None:
    heartbeats, beat = held()
    swallowed: list[Exception] = []

    def careless() -> None:
        try:
            time.sleep(10)
        except Exception as exc:  # what careless handler code does
            swallowed.append(exc)

    with (
        pytest.raises(DeadlineExceeded),
        limited(heartbeats, beat, 0.2, 5.0, what="ask", give_up=lambda: None),
    ):
        careless()
    assert swallowed == []


def test_a_block_that_returns_in_time_is_not_interrupted_later() -> None:
    heartbeats, beat = held()
    with limited(heartbeats, beat, 0.3, 5.0, what="ask", give_up=lambda: None):
        time.sleep(0.05)
    time.sleep(0.5)  # past the timeout: nothing may fire now
    assert not beat.timed_out.is_set()


def test_a_stray_signal_after_the_block_is_swallowed_not_fatal() -> None:
    """The heartbeat thread may send its SIGALRM just as the handler returns: it must
    find cairn's handler, which ignores it, not SIGALRM's default (ending the process)."""
    heartbeats, beat = held()
    with limited(heartbeats, beat, 30.0, 5.0, what="ask", give_up=lambda: None):
        pass
    deadlines._Process.pending += 1
    os.kill(os.getpid(), signal.SIGALRM)
    time.sleep(0.05)  # the handler ran: it raised nothing, and the process lives
    assert deadlines._Process.pending == 0


def test_on_another_thread_the_handler_is_told_then_left_without_its_lease() -> None:
    heartbeats, beat = held()
    given_up = threading.Event()
    finished = threading.Event()

    def handler() -> None:
        with limited(heartbeats, beat, 0.2, 0.2, what="ask", give_up=given_up.set):
            time.sleep(1.0)  # cannot be interrupted on this thread
        finished.set()

    thread = threading.Thread(target=handler)
    thread.start()
    assert given_up.wait(2.0), "the lease was not given up after timeout + grace"
    assert beat.cancelled.is_set() and beat.lost.is_set()  # nothing it returns commits
    assert not finished.is_set()
    thread.join(5)
    assert finished.is_set()


def test_no_timeout_no_limit() -> None:
    heartbeats, beat = held()
    with limited(heartbeats, beat, None, 1.0, what="ask", give_up=lambda: None):
        time.sleep(0.05)
    assert beat.stop_at is None and not beat.timed_out.is_set()
