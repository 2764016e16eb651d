"""Keeping leases alive while handlers run.

One daemon thread per process (:class:`Heartbeats`) renews every lease this process
holds, each at its own interval. Starting a thread per step would cost more than the
step; the thread also idles without cost when nothing is held.

Each beat also asks whether the run is being cancelled (one primary-key read in
PostgreSQL), which the handler sees as ``ctx.cancelled``.

When a renewal fails (the token no longer matches, or Redis cannot be reached until the
lease's own deadline has passed), the lease is marked lost: the step context exposes it
as ``ctx.lease_lost`` and the worker does not commit. Each beat also keeps a monotonic
deadline of its own, so a worker stops believing in a lease it could not renew in time
even if Redis never answers — and a process woken from a pause (SIGSTOP, a stall, a
partition) past that deadline trusts nothing until :meth:`Heartbeats.confirm` has
renewed the lease: it makes no effect call and commits nothing first.

The same thread keeps each execution's own deadlines (its node's timeout): at the
timeout the handler is told to stop (``ctx.cancelled``, and the ``on_stop`` the worker
gave); past the grace period, ``on_overrun`` (the worker replaces its process).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.lease.port import Lease, Leases
from cairn.model.keys import lease_key

log = logging.getLogger(__name__)

# With nothing held, the thread still looks at its beats this often: a lease taken for a
# step shorter than this is then held and let go without waking it at all.
IDLE_LOOK_S = 1.0


@dataclass
class Beat:
    """One held lease, as the heartbeat thread keeps it."""

    lease: Lease
    interval_s: float
    deadline: float  # monotonic: past it, this process no longer trusts the lease
    next_renewal: float
    lost: threading.Event = field(default_factory=threading.Event)
    record: dict[str, Any] = field(default_factory=dict)  # progress, shown by `cairn status`
    # Asked on every beat: is the run being cancelled? (PostgreSQL's word, not a revoke.)
    cancel_requested: Callable[[], bool] | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Called (on the heartbeat thread) when a beat finds the run cancelled: an async
    # handler is cancelled at its await rather than left to look at ctx.cancelled.
    on_cancel: Callable[[], None] | None = None
    # The execution's own deadlines (monotonic; None: its node has no timeout): at
    # ``stop_at`` it is told to stop, at ``overrun_at`` it has outlived its grace period.
    stop_at: float | None = None
    overrun_at: float | None = None
    on_stop: Callable[[], None] | None = None
    on_overrun: Callable[[], None] | None = None
    timed_out: threading.Event = field(default_factory=threading.Event)

    @property
    def valid(self) -> bool:
        """Still the holder, as far as this process can know without asking."""
        return not self.lost.is_set() and time.monotonic() < self.deadline

    def next_due(self) -> float:
        """When the heartbeat thread next has something to do for this beat."""
        due = [self.next_renewal]
        if self.stop_at is not None and not self.timed_out.is_set():
            due.append(self.stop_at)
        elif self.overrun_at is not None and self.on_overrun is not None:
            due.append(self.overrun_at)
        return min(due)


class Heartbeats:
    def __init__(self, leases: Leases) -> None:
        self.leases = leases
        self._beats: dict[str, Beat] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._watching = False
        # When the thread next looks at the beats untold (monotonic; -inf: it is busy and
        # looks again at once). A beat due sooner must wake it; one due later need not.
        self._looks_at = -math.inf

    def stop_announced(self, key: str) -> None:
        """Someone committed a decision that stops the execution holding ``key`` (a
        cancel, a timeout, a join that went on): if it runs here, ask PostgreSQL now
        rather than at the next beat — the announcement is a hint, the row the truth."""
        with self._lock:
            beat = self._beats.get(key)
        if beat is not None:
            self._check_cancel(beat)

    def hold(
        self,
        lease: Lease,
        interval_s: float,
        cancel_requested: Callable[[], bool] | None = None,
    ) -> Beat:
        # Both from when the lease was taken: what came between renewed nothing (a
        # renewal already due is made at once, a lease already out is lost at confirm).
        taken = min(lease.taken_at, time.monotonic())
        beat = Beat(
            lease,
            interval_s,
            deadline=taken + lease.ttl_s,
            next_renewal=taken + interval_s,
            cancel_requested=cancel_requested,
        )
        with self._wake:
            self._beats[lease.key] = beat
            if not self._watching:  # a stop announced for a lease held here: ask at once
                self._watching = True
                self.leases.watch_stops(self.stop_announced)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="cairn-heartbeats", daemon=True
                )
                self._thread.start()
            self._nudge(beat)
        return beat

    def progress(self, beat: Beat, **record: Any) -> None:
        """A milestone: update the heartbeat record now (lossy: a failure only logs)."""
        beat.record.update({k: v for k, v in record.items() if v is not None})
        try:
            self.leases.beat(beat.lease, beat.record, progressed=True)
        except Exception:
            log.warning("heartbeat for %s not written", beat.lease.key, exc_info=True)

    def confirm(self, beat: Beat) -> bool:
        """Is this process still the holder? Without asking while its own monotonic
        deadline holds; past it (the process was paused, starved or cut off), only once
        a renewal has succeeded — a process woken from a long pause must learn that it
        lost the lease before it calls the outside world, not after."""
        if beat.lost.is_set():
            return False
        if time.monotonic() < beat.deadline:
            return True
        self._renew(beat, confirming=True)
        return beat.valid

    def limit(
        self,
        beat: Beat,
        timeout_s: float,
        grace_s: float,
        *,
        on_stop: Callable[[], None] | None,
        on_overrun: Callable[[], None] | None,
    ) -> None:
        """Hold this execution to its node's timeout, from now."""
        now = time.monotonic()
        with self._wake:
            beat.stop_at, beat.overrun_at = now + timeout_s, now + timeout_s + grace_s
            beat.on_stop, beat.on_overrun = on_stop, on_overrun
            beat.timed_out.clear()
            self._nudge(beat)

    def unlimit(self, beat: Beat) -> None:
        with self._wake:
            beat.stop_at = beat.overrun_at = beat.on_stop = beat.on_overrun = None

    def drop(self, beat: Beat) -> None:
        with self._lock:
            if self._beats.get(beat.lease.key) is beat:
                del self._beats[beat.lease.key]

    def _nudge(self, beat: Beat) -> None:
        """Wake the thread (under the lock) only if ``beat`` is due before it looks."""
        if beat.next_due() < self._looks_at:
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [b for b in self._beats.values() if b.next_due() <= now]
                if not due:
                    upcoming = min(
                        (b.next_due() for b in self._beats.values()), default=now + IDLE_LOOK_S
                    )
                    self._looks_at = upcoming
                    self._wake.wait(upcoming - now)
                    self._looks_at = -math.inf
                    continue
            for beat in due:
                self._deadlines(beat, now)
                if beat.next_renewal <= now:
                    self._renew(beat)

    def _deadlines(self, beat: Beat, now: float) -> None:
        if beat.stop_at is not None and now >= beat.stop_at and not beat.timed_out.is_set():
            log.warning("%s ran past its node's timeout: telling it to stop", beat.lease.key)
            beat.timed_out.set()
            beat.cancelled.set()
            if beat.on_stop is not None:
                self._call(beat.on_stop, beat)
        if beat.overrun_at is not None and now >= beat.overrun_at and beat.on_overrun:
            overrun, beat.on_overrun = beat.on_overrun, None
            log.error("%s ran past its node's timeout and grace period", beat.lease.key)
            self._call(overrun, beat)

    @staticmethod
    def _call(callback: Callable[[], None], beat: Beat) -> None:
        try:
            callback()
        except Exception:
            log.exception("stop action for %s failed", beat.lease.key)

    def _renew(self, beat: Beat, *, confirming: bool = False) -> None:
        asked_at = time.monotonic()  # the new TTL runs from the request, not the reply
        beat.next_renewal = asked_at + beat.interval_s
        try:
            renewed = self.leases.renew(beat.lease, beat.record)
        except Exception:  # Redis down: keep trying until our own deadline passes
            log.warning("lease renewal failed for %s", beat.lease.key, exc_info=True)
            if asked_at < beat.deadline or confirming:
                return
            renewed = False
        if renewed:
            beat.deadline = asked_at + beat.lease.ttl_s
            self._check_cancel(beat)
        else:
            beat.lost.set()
            self.drop(beat)

    @staticmethod
    def _check_cancel(beat: Beat) -> None:
        if beat.cancel_requested is None or beat.cancelled.is_set():
            return
        try:
            if not beat.cancel_requested():
                return
        except Exception:  # the database is away: the commit checks again
            log.warning("could not check %s for a cancel", beat.lease.key, exc_info=True)
            return
        beat.cancelled.set()
        if beat.on_cancel is not None:
            Heartbeats._call(beat.on_cancel, beat)


def run_beats(
    leases: Leases, run_id: str, running: Sequence[tuple[str, int, str]]
) -> dict[str, dict[str, Any] | None]:
    """The heartbeat record of each of a run's running executions (``RunState.running``;
    None: no beat yet), labelled ``node#iteration`` (`` (compensate)`` for an undo)."""
    if not running:
        return {}
    records = leases.beats([lease_key(run_id, *execution) for execution in running])
    return {
        f"{node}#{iteration}" + ("" if phase == "run" else f" ({phase})"): record
        for (node, iteration, phase), record in zip(running, records, strict=True)
    }


def beat_view(beat: Mapping[str, Any]) -> dict[str, Any]:
    """A heartbeat record as clients see it: the worker, the handler's progress (numbers,
    not Redis's strings), seconds since the last beat, and an estimate of the seconds
    left — from the rate of progress so far, when the handler reports a total."""
    done, total = _number(beat.get("done")), _number(beat.get("total"))
    started, beat_at = _number(beat.get("started_at")), _number(beat.get("beat_at"))
    eta_s = None
    if done and total is not None and started is not None and beat_at is not None:
        rate = done / max(beat_at - started, 1e-9)
        eta_s = max(0.0, total - done) / rate
    return {
        "worker": beat.get("worker"),
        "done": done,
        "total": total,
        "message": beat.get("message") or None,
        "age_s": _number(beat.get("age_s")),
        "eta_s": eta_s,
        "no_progress_s": _number(beat.get("progress_age_s")),
        "stalled": bool(beat.get("stalled")),
    }


def _number(value: object) -> float | None:
    if value is None or value in ("", "None"):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
