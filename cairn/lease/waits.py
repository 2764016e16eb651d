"""Lease wait: how long a node message waited between its publish and its lease.

Whoever delivers a node message to the runner (the Celery task, the in-process broker)
wraps the call in :func:`delivered` with the time the message was published. The
leases read it back when they take the lease and count the wait into a histogram kept
beside the lease counters, inside the acquire itself: no extra round trip, and in Redis
one histogram for the whole fleet, whichever process (or prefork child) took the lease.

The wait is the message's time in the queue plus the worker's read of the execution
before it claims it. It starts at the publish, which follows the dispatch commit at once
on the fast path; a message the relay publishes later starts at that later publish; a
step its worker continues with (never published) starts at the commit before it. The
two ends are wall clocks of two processes (publisher and worker), so skew between hosts
shows up in the numbers; a negative wait counts as zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from cairn import clock

# Upper bounds, seconds. Waits run from a few ms (an idle fleet) to minutes (a backlog).
WAIT_BUCKETS_S: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
# A step's execution and commit: from a millisecond (a commit, a trivial handler) to
# minutes (a model call).
STEP_BUCKETS_S: tuple[float, ...] = (0.001, 0.0025, *WAIT_BUCKETS_S)
INF = "+Inf"
SUM_FIELD = "sum"

_published_at: ContextVar[float | None] = ContextVar("cairn_published_at", default=None)


@contextmanager
def delivered(published_at: float | None) -> Iterator[None]:
    """Run the handling of one node message knowing when it was published (epoch s)."""
    token = _published_at.set(published_at)
    try:
        yield
    finally:
        _published_at.reset(token)


def current_wait() -> float | None:
    """Seconds since the message being handled here was published; None if unknown."""
    published_at = _published_at.get()
    if published_at is None:
        return None
    return max(0.0, clock.wall() - published_at)


def bucket_field(wait_s: float, bounds: tuple[float, ...] = WAIT_BUCKETS_S) -> str:
    """The histogram field a wait is counted in: its bucket's upper bound."""
    for bound in bounds:
        if wait_s <= bound:
            return _label(bound)
    return INF


def _label(bound: float) -> str:
    return repr(bound)


@dataclass(frozen=True)
class WaitHistogram:
    """Lease waits (or any durations): a count per bucket (not cumulative, one increment
    per wait; the last bucket is above every bound) and the sum of all waits."""

    counts: tuple[int, ...]
    sum_s: float
    bounds: tuple[float, ...] = WAIT_BUCKETS_S

    @classmethod
    def from_fields(
        cls, fields: Mapping[str, float], bounds: tuple[float, ...] = WAIT_BUCKETS_S
    ) -> WaitHistogram:
        """From the stored fields (bucket label → count, ``sum``); unknown labels, left
        by another bucket layout, are dropped."""
        labels = [*(_label(b) for b in bounds), INF]
        return cls(
            tuple(int(fields.get(label, 0)) for label in labels),
            float(fields.get(SUM_FIELD, 0.0)),
            bounds,
        )

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus's form: (upper bound, waits at or below it), ending with +Inf."""
        labels = [*(_label(b) for b in self.bounds), INF]
        total = 0
        buckets = []
        for label, count in zip(labels, self.counts, strict=True):
            total += count
            buckets.append((label, total))
        return buckets

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding quantile ``q``: ``inf`` above every
        bound, None without waits."""
        if not self.count:
            return None
        rank = q * self.count
        for bound, (_, total) in zip(self.bounds, self.cumulative(), strict=False):
            if total >= rank:
                return bound
        return math.inf

    def summary(self) -> str:
        """For people: count, mean, and p50/p95 as bucket bounds."""
        if not self.count:
            return "none measured"
        parts = [f"{self.count} measured", f"mean {_ms(self.sum_s / self.count)}"]
        for name, q in (("p50", 0.5), ("p95", 0.95)):
            bound = self.quantile(q)
            assert bound is not None
            parts.append(
                f"{name} <= {_ms(bound)}"
                if math.isfinite(bound)
                else f"{name} > {_ms(self.bounds[-1])}"
            )
        return ", ".join(parts)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"
