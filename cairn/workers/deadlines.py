"""Holding a handler to its node's timeout, however it behaves.

At the timeout the handler is told to stop: ``ctx.cancelled`` becomes true and, for a
synchronous handler in a worker's main thread (a prefork child's task),
:class:`cairn.DeadlineExceeded` is raised into it at its current call — a blocked
``time.sleep``, a socket read, a loop — by a ``SIGALRM`` the heartbeat thread sends. Past
the grace period (``CAIRN_TIMEOUT_GRACE``) a handler still running (it blocked the
signal, swallowed the exception, or sits in C code that retries) is beyond asking: its
worker process gives its lease up and ends itself, and the Celery pool starts a fresh
one — what Celery's hard time limit does. The run goes on meanwhile: the node's timeout
timer has failed the attempt (a transient failure), and the next attempt supersedes the
lease of the one that would not stop.

An ``async def`` handler is cancelled at its current ``await`` instead, wherever it runs
(:mod:`cairn.workers.aio`); past the grace period, one that would not end is left to the
loop and its lease given up — or, awaited by a prefork child's main thread, its process
ends. One handed to the loop (:mod:`cairn.workers.awaiting`) is limited from the loop's
thread, so it never ends the process the other awaiting nodes share.

A synchronous handler on a thread of a process that runs others (``--pool threads``, the
embedded mode) cannot be interrupted nor killed: it is told to stop, its lease is given up at the
end of the grace period so that nothing it does later is committed, and the thread is
left to finish on its own (a warning says so).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from cairn.lease.heartbeat import Beat, Heartbeats
from cairn.model.failures import DeadlineExceeded
from cairn.workers.aio import Coroutines

log = logging.getLogger(__name__)

EXIT_OVERRUN = 75  # a worker process that ended itself: a handler outlived its grace


class _Process:
    # True in a process that runs one execution at a time and that its pool replaces
    # when it ends (a Celery prefork child): the overrun ends the process.
    isolated = False
    # The execution the SIGALRM handler may interrupt: its description, or None.
    armed: str | None = None
    # SIGALRMs the heartbeat thread sent that the handler has not seen yet: one that
    # arrives just after its execution returned is swallowed, never passed on (in a
    # prefork child the previous handler ends the process).
    pending = 0
    previous: Any = None


def isolate() -> None:
    """This process runs one node at a time and may end itself at an overrun."""
    _Process.isolated = True


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _Process.pending:
        _Process.pending -= 1
        armed, _Process.armed = _Process.armed, None
        if armed is not None:
            raise DeadlineExceeded(armed)
        return
    previous = _Process.previous  # a SIGALRM that is not ours
    if callable(previous):
        previous(signum, frame)


def _install() -> None:
    """Handle SIGALRM here, passing on what is not ours (and left installed after the
    execution: a signal sent just as a handler returns must find this handler, never
    SIGALRM's default action, which ends the process)."""
    if signal.getsignal(signal.SIGALRM) is not _interrupt:
        _Process.previous = signal.signal(signal.SIGALRM, _interrupt)


@contextmanager
def limited(
    heartbeats: Heartbeats,
    beat: Beat,
    timeout_s: float | None,
    grace_s: float,
    *,
    what: str,
    give_up: Callable[[], None],
    coroutines: Coroutines | None = None,
) -> Iterator[None]:
    """Run the block under ``timeout_s`` (None: no limit). ``give_up`` releases the
    lease, at the overrun, before the process ends or the thread is left behind.
    ``coroutines``: what the block runs is async, and cancelled at the timeout."""
    if timeout_s is None:
        yield
        return
    in_main = threading.current_thread() is threading.main_thread()
    message = f"{what} timed out after {timeout_s:g} s"
    on_stop = _stopper(message, in_main, coroutines)
    on_overrun = _overrunner(
        beat, give_up, what=what, grace_s=grace_s, coroutines=coroutines, in_main=in_main
    )
    _Process.armed = message if in_main and coroutines is None else None
    heartbeats.limit(beat, timeout_s, grace_s, on_stop=on_stop, on_overrun=on_overrun)
    try:
        yield
    finally:
        _Process.armed = None
        heartbeats.unlimit(beat)


def _stopper(
    message: str, in_main: bool, coroutines: Coroutines | None
) -> Callable[[], None] | None:
    """How the block is stopped at its timeout: its coroutines cancelled, or
    :class:`DeadlineExceeded` raised into the main thread by a SIGALRM; None on a thread
    that cannot be interrupted."""
    if coroutines is not None:
        cancel = coroutines

        def cancel_coroutines() -> None:
            cancel.cancel(DeadlineExceeded(message))

        return cancel_coroutines
    if in_main:
        _install()
        main = threading.main_thread().ident
        assert main is not None

        def interrupt_main() -> None:
            _Process.pending += 1
            signal.pthread_kill(main, signal.SIGALRM)

        return interrupt_main
    return None


def _overrunner(
    beat: Beat,
    give_up: Callable[[], None],
    *,
    what: str,
    grace_s: float,
    coroutines: Coroutines | None,
    in_main: bool,
) -> Callable[[], None]:
    """What is done when the block outlives its grace period: its lease given up, then
    its process ended (when the pool replaces it), or its coroutines or thread left
    behind."""

    def on_overrun() -> None:
        beat.lost.set()  # nothing it returns from now on is committed
        give_up()
        if coroutines is not None:
            coroutines.abandon()
        if _Process.isolated and in_main:
            log.critical(
                "%s: still running %g s past its timeout; ending worker process %d "
                "(its pool starts a new one)",
                what,
                grace_s,
                os.getpid(),
            )
            logging.shutdown()
            os._exit(EXIT_OVERRUN)
        if coroutines is not None:
            log.error(
                "%s: still running %g s past its timeout and its cancel; its lease is "
                "given up and the coroutine left to the loop",
                what,
                grace_s,
            )
            return
        log.error(
            "%s: still running %g s past its timeout, on a thread that cannot be stopped; "
            "its lease is given up and the thread left to finish (use the prefork pool to "
            "have such handlers' processes replaced)",
            what,
            grace_s,
        )

    return on_overrun
