"""Workflows and baseline tasks of bench/waits.py: runs parked in a wait, timers coming due,
a fan-out of eight joined, and the plain Celery chord of the same shape."""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from cairn.definitions.builder import Workflow
from cairn.model.definition import WorkflowDefinition

BRANCHES = 8
PARKED = "bench_parked"
TIMER = "bench_timer"
FANOUT = "bench_fanout8"
AFTER_SIGNAL_MARKS = "bench:after_signal"
CHORD_MARKS = "bench:chord"

_marks: redis.Redis | None = None


def _mark(key: str, text: str) -> None:
    """One RPUSH of ``text`` to the marks list (one connection per worker process)."""
    global _marks  # noqa: PLW0603 - one connection per worker process
    if _marks is None:
        _marks = redis.Redis.from_url(os.environ["BENCH_MARKS_URL"])
    _marks.rpush(key, text)


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


def after_signal(ctx: Any, state: dict[str, Any]) -> None:
    """The node after the wait: notes when its handler started, by this host's clock."""
    _mark(AFTER_SIGNAL_MARKS, f"{ctx.run_id} {time.time()}")


# A run parked for a person: nothing happens until the signal ``go`` (or an hour passes).
parked = (
    Workflow(PARKED, version=1)
    .wait("approval", signals={"go": "after"}, timeout="1h", on_timeout="expired")
    .task("after", after_signal, next="done")
    .end("done")
    .end("expired", "failed")
)


def timer_workflow(timeout_ds: int) -> WorkflowDefinition:
    """A wait that times out after ``timeout_ds`` tenths of a second straight into an end
    node: firing its timer is the scheduler's work alone (no worker, no message). One
    version per timeout, so that runs submitted one after another can come due at
    chosen times; registered by the bench as it needs them."""
    return (
        Workflow(TIMER, version=timeout_ds)
        .wait("pause", signals={"go": "done"}, timeout=timeout_ds / 10, on_timeout="timed_out")
        .end("done")
        .end("timed_out")
        .build()
    )


fanout = Workflow(FANOUT, version=1).parallel(
    "fan", [f"b{i}" for i in range(BRANCHES)], join={"policy": "all"}, next="after"
)
for _index in range(BRANCHES):
    fanout.task(f"b{_index}", noop)
fanout.task("after", noop, next="done").end("done")

# -- the baseline: eight trivial tasks and a callback as a plain Celery chord --------------
# Configured like bench.workflows.baseline (JSON, late acks, prefetch 1), except that a
# chord needs a result backend to count its header's results: Redis, beside the broker.

chord_baseline = Celery(
    "bench_chord",
    broker=os.environ.get("BENCH_BROKER_URL", "memory://"),
    backend=os.environ.get("BENCH_BACKEND_URL", "cache+memory://"),
    set_as_current=False,
)
chord_baseline.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    worker_hijack_root_logger=False,
    result_expires=600,
)


@chord_baseline.task(name="bench.branch")  # type: ignore[untyped-decorator]
def branch(run: int, index: int) -> int:
    """A trivial header task; its result goes to the backend for the chord's counter."""
    return index


@chord_baseline.task(name="bench.joined", ignore_result=True)  # type: ignore[untyped-decorator]
def joined(results: list[int], run: int) -> None:
    """The chord's callback: notes when the joined run finished."""
    _mark(CHORD_MARKS, f"{run} {len(results)} {time.time()}")
