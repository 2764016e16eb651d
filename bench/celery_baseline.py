"""The plain Celery baseline's side of a bench: one run of a shape sent, and a wait for
the marks its tasks leave in Redis. The chain is :data:`bench.workflows.baseline` (every
task marks its end), the chord :data:`bench.wait_workflows.chord_baseline` (its callback
marks the run's end)."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
from celery import chain, chord

from bench.wait_workflows import BRANCHES, branch, joined
from bench.workflows import step

CHAIN_MARKS = "bench:marks"


def send_run(run: int, *, fanout: bool, steps: int) -> None:
    """Run ``run`` of the chain of ``steps`` tasks, or of the chord of BRANCHES."""
    if fanout:
        chord(branch.si(run, index) for index in range(BRANCHES))(joined.s(run))
    else:
        chain(step.si(run, index) for index in range(steps)).apply_async()


def marks_waiter(
    marks: redis.Redis, key: str, ended: Callable[[], int | None]
) -> Callable[[int], None]:
    """A wait for ``count`` marks under ``key``; it gives up when ``ended()`` says the
    worker exited, or after ten minutes."""

    def wait(count: int, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while marks.llen(key) < count:
            if ended() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"{marks.llen(key)} of {count} marks")
            time.sleep(0.002)

    return wait
