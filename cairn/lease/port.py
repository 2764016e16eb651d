"""Leases: who may work on a node execution right now, and how it is doing.

A lease is ``SET key token NX PX ttl`` with a random token per claim. Renewal and
release are Lua scripts that act only while the stored token is still the caller's, so
a worker that lost its lease (it expired during a GC pause or a SIGSTOP, and someone
else claimed the node) can never extend or delete the new holder's lease. Expiry is
judged by Redis's clock alone. Redis is the first gate; PostgreSQL's conditional result
commit is the final arbiter, so losing every lease never lets a result commit twice.

Each lease carries a heartbeat record beside it (``cairn:beat:...``, a hash): the worker,
when it started, its progress, and ``beat_at`` by Redis's clock — written by the same
scripts that acquire and renew the lease, so a heartbeat costs no extra round trip. It
is lossy by design (a TTL of three lease periods) and never replaces a checkpoint.

The same scripts keep fleet-wide counters in one hash (``STATS_KEY``: acquired,
contended, renewed, lost, and whatever :meth:`Leases.count` adds, such as
stale_rejected) and a histogram of lease waits (``WAIT_KEY``, see
:mod:`cairn.lease.waits`), so every process, prefork children included, adds to the
same numbers; :mod:`cairn.observe.metrics.leases` serves them to Prometheus.

Each claim also gets a fencing token (``Lease.fence``): a counter per execution
(``cairn:fence:...``) that every acquire raises, never below one more than the fence
PostgreSQL recorded (the caller passes it as ``floor``), so it keeps rising even after
Redis lost its keys. A claim above 1 is a takeover and is written to PostgreSQL, whose
result commit requires the newest fence: the stale holder is refused there too.

A lease's value names the attempt that holds it (``<attempt>:<random>``). A newer
attempt of the same execution supersedes an older one's lease instead of waiting for it:
an attempt the orchestrator gave up on (its node timed out) may still be running, deaf
to every request to stop, and must not keep its retry from starting.

Every live claim is also in one sorted set (``CLAIMS_KEY``), scored by when its lease
runs out by Redis's clock. A claim whose lease ran out without being released — its
holder died, or was paused past its TTL — stays there until the scheduler takes it
(:meth:`Leases.lapsed`), so a dead worker's node is found within one sweep of its lease
expiring, whatever has become of its heartbeat record.

:mod:`cairn.lease.redis` is the fleet's implementation (its Lua scripts in
``lease/scripts/``); :mod:`cairn.lease.memory` the in-process twin for the embedded
default and unit tests. One contract suite holds the two together
(:class:`cairn.testing.contracts.LeasesContract`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cairn.lease.waits import STEP_BUCKETS_S, SUM_FIELD, WaitHistogram, bucket_field

BEAT_TTL_PERIODS = 3  # a heartbeat record outlives its lease by this many periods
STEP_PARTS = ("execution", "commit")  # the timed parts of a step, histogrammed fleet-wide
# The fence counter outlives leases (a stale holder may wake up much later). Once the
# result is committed it is kept a while longer, not deleted: a worker that read the
# execution as unfinished just before that commit must still get a fence above 1, whose
# claim PostgreSQL then refuses — else it would take the free lease as a first claim and
# run the finished node again.
FENCE_TTL_MS = 7 * 24 * 3600 * 1000
FINISHED_FENCE_TTL_MS = 10 * 60 * 1000
LAPSED_HOLD_S = 30.0  # a lapsed claim taken, and not settled, comes back after this


# A run's live chunk log (streamed model output): capped, and gone an hour after its last.
CHUNKS_KEPT = 20_000
CHUNKS_TTL_S = 3600
# The most one read_chunks returns: a reader that gets this many has more waiting.
CHUNKS_PER_READ = 1000


@dataclass(frozen=True)
class Lease:
    key: str
    token: str
    ttl_s: float
    fence: int = 1  # this claim's fencing token: rises with every claim of the execution
    # The previous holder left its heartbeat record behind: it died holding the lease,
    # which this claim takes over (a recovery, recorded as one).
    took_over: bool = False
    attempt: int = 1
    # An older attempt still held the lease (it was given up on, e.g. timed out): this
    # claim took it from that attempt, which can no longer renew nor commit.
    superseded: bool = False
    # The previous claim ran out unreleased (its holder died, or was paused past its
    # TTL): this claim runs interrupted work again (resumed). True whenever took_over is,
    # and also after a sweep took the dead holder's record — before the sweep has
    # counted the death as well as after, so nobody need wait for that count.
    lapsed: bool = False
    # When the claim was asked for (time.monotonic()): its TTL runs from then, not from
    # when its heartbeat starts — the steps between (slots, a takeover's count) renew
    # nothing, and a process must not trust a lease longer than the store keeps it.
    taken_at: float = dataclasses.field(default_factory=time.monotonic, compare=False)


@dataclass(frozen=True)
class Lapsed:
    """A claim whose lease ran out without being released, as :meth:`Leases.lapsed`
    takes it: the lease key, and the heartbeat record its holder left (None if gone)."""

    key: str
    record: dict[str, Any] | None


class Handing(Protocol):
    """A :meth:`Leases.hand_on` on its way: its answer is read when the lease is
    needed, so that the worker does what comes before meanwhile."""

    def taken(self) -> Lease | None:
        """The lease claimed (None: it was held), once its answer is read; raises what
        the call raised. Read once: later calls give the same."""
        ...


@dataclass(frozen=True)
class Handed:
    """A hand-on whose answer is known already (a backend without round trips)."""

    lease: Lease | None

    def taken(self) -> Lease | None:
        return self.lease


class Leases(Protocol):
    def acquire(
        self,
        key: str,
        ttl_s: float,
        record: Mapping[str, Any] | None = None,
        floor: int = 0,
        attempt: int = 1,
    ) -> Lease | None:
        """Claim ``key`` for ``attempt``; None if it holds it, or a newer attempt does
        (an older attempt's lease is superseded). The claim's fence is above ``floor``
        (the newest fence PostgreSQL recorded) and above every earlier claim's. A claim
        still in :meth:`claims` (or held back by :meth:`lapsed` or :meth:`forget`, not yet
        settled) whose lease is gone makes this one ``lapsed``."""
        ...

    def renew(self, lease: Lease, record: Mapping[str, Any] | None = None) -> bool: ...

    def beat(self, lease: Lease, record: Mapping[str, Any], progressed: bool = False) -> bool:
        """Update the heartbeat record without renewing (``progressed``: the handler
        reported progress, which stall detection measures from)."""
        ...

    def lapsed(self, limit: int) -> list[Lapsed]:
        """Take up to ``limit`` claims whose lease ran out without a release (their
        holders died or were paused past the TTL), each once, fleet-wide. Each comes
        back after :data:`LAPSED_HOLD_S` unless :meth:`settle_lapsed` says it was dealt
        with."""
        ...

    def settle_lapsed(self, key: str) -> None:
        """A lapsed claim taken by :meth:`lapsed` (or held back by :meth:`forget`) has been
        dealt with: it leaves the claims, unless a new holder has claimed the lease since."""
        ...

    def claims(self) -> list[str]:
        """The lease keys of every claim not yet released nor taken as lapsed."""
        ...

    def flag_stalled(self, key: str) -> bool:
        """Mark a live claim's heartbeat record stalled; True if it was not already (the
        flag goes with the next progress)."""
        ...

    def append_chunks(self, run_id: str, chunks: Sequence[Mapping[str, Any]]) -> None:
        """Add what streaming model calls of the run just said to its chunk log: a capped,
        expiring log (live output for people watching, not a record: the record is the
        assembled message)."""
        ...

    def read_chunks(
        self, run_id: str, after: str, block_s: float = 0.0
    ) -> list[tuple[str, dict[str, Any]]]:
        """The run's chunks after the entry ``after`` ("0": from the start), as (id,
        chunk), in order, at most ``CHUNKS_PER_READ``; waiting up to ``block_s`` for one
        if there is none yet."""
        ...

    def announce_stops(self, keys: Sequence[str]) -> None:
        """Tell the holders of these leases, wherever they run, to ask now whether they
        must stop. A hint, best effort: a lost one is made up by the next heartbeat."""
        ...

    def watch_stops(self, on_stop: Callable[[str], None]) -> None:
        """Call ``on_stop(key)`` in this process for each key announced from now on
        (from a thread of the backend's)."""
        ...

    def release(
        self, lease: Lease, finished: bool = False, timings: Mapping[str, float] | None = None
    ) -> bool:
        """Give the lease up (token-checked); ``finished``: the holder's result is
        committed, so the execution's fence counter is needed no more. ``timings``: the
        seconds the step's parts took (:data:`STEP_PARTS`), counted into the fleet's
        histograms in the same round trip."""
        ...

    def hand_on(
        self,
        lease: Lease,
        key: str,
        ttl_s: float,
        *,
        timings: Mapping[str, float] | None = None,
        record: Mapping[str, Any] | None = None,
        attempt: int = 1,
    ) -> Handing:
        """:meth:`release` ``lease`` as finished and :meth:`acquire` ``key`` (floor 0:
        a first claim), in one round trip — a worker going on from the step it
        committed to the next, which that commit dispatched. The release happens
        whether the claim is had or not (``taken()`` None). Sent, not waited for: the
        answer is read by :meth:`Handing.taken`, when the next step needs its lease."""
        ...

    def count(self, name: str) -> None:
        """Add one to a fleet-wide counter (shown with the lease counters)."""
        ...

    def add(self, counts: Mapping[str, int]) -> None:
        """Add to fleet-wide counters (shown with the lease counters), in one round trip."""
        ...

    def held(self, key: str) -> bool: ...

    def beats(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        """The heartbeat records of these leases, each with ``age_s`` by the lease clock."""
        ...

    def running(self) -> list[dict[str, Any]]:
        """Every heartbeat record in the fleet, each with its lease key."""
        ...

    def forget(self, key: str) -> bool:
        """A recovery found the holder of ``key`` dead (its heartbeat record outlived
        the lease): drop the record, so the death is the caller's to count, and hold its
        claim back like a lapsed one until :meth:`settle_lapsed`, so a worker claiming the
        lease meanwhile still knows it resumes. False, changing nothing, if the lease is
        held again (a worker claimed it first: the takeover is that worker's)."""
        ...

    def stats(self) -> dict[str, int]:
        """Fleet-wide counters: acquired, contended, renewed, lost, and those added by
        :meth:`count` (stale_rejected)."""
        ...

    def waits(self) -> WaitHistogram:
        """Fleet-wide histogram of lease waits (see :mod:`cairn.lease.waits`)."""
        ...

    def step_times(self) -> dict[str, WaitHistogram]:
        """Fleet-wide histograms of the timed parts of steps, by part."""
        ...


def step_fields(timings: Mapping[str, float] | None) -> list[Any]:
    """(field, amount) pairs, flat, adding each timed part to its histogram."""
    fields: list[Any] = []
    for part, seconds in (timings or {}).items():
        if part in STEP_PARTS and seconds is not None and seconds >= 0:
            bucket = bucket_field(seconds, STEP_BUCKETS_S)
            fields += [f"{part}:{bucket}", 1, f"{part}:{SUM_FIELD}", round(seconds, 6)]
    return fields


def step_histograms(fields: Mapping[str, float]) -> dict[str, WaitHistogram]:
    by_part: dict[str, dict[str, float]] = {part: {} for part in STEP_PARTS}
    for field, value in fields.items():
        part, _, label = field.partition(":")
        if part in by_part:
            by_part[part][label] = value
    return {
        part: WaitHistogram.from_fields(found, STEP_BUCKETS_S) for part, found in by_part.items()
    }


def flat(record: Mapping[str, Any] | None) -> list[str]:
    return [str(item) for pair in (record or {}).items() for item in pair]


def decoded(record: Mapping[Any, Any], now: float | None) -> dict[str, Any]:
    """A heartbeat record as text, with ``age_s`` (since the last beat),
    ``running_s`` (since the claim) and ``progress_age_s`` (since the last progress),
    each by the lease clock ``now``."""
    data = {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in record.items()
    }
    if now is not None and "beat_at" in data:
        data["age_s"] = max(0.0, now - float(data["beat_at"]))
        if "started_at" in data:
            data["running_s"] = max(0.0, now - float(data["started_at"]))
        progress_at = data.get("progress_at", data.get("started_at"))
        if progress_at is not None:
            data["progress_age_s"] = max(0.0, now - float(progress_at))
    return data


def ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
