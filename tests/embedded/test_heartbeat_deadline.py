"""A lease is trusted from when it was taken, not from when its heartbeat starts: what
comes between (slots, a takeover's count) renews nothing, and a process stalled there
past the TTL must learn at its next confirm that the lease is gone — before it calls
the outside world — not believe it holds it for another TTL."""

from __future__ import annotations

import dataclasses
import time

from cairn.lease.heartbeat import Heartbeats
from cairn.lease.memory import MemoryLeases

TTL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_deadline_and_the_first_renewal_count_from_the_claim() -> None:
    leases = MemoryLeases()
    lease = leases.acquire("k", TTL)
    assert lease is not None
    taken = dataclasses.replace(lease, taken_at=time.monotonic() - 3.0)
    heartbeats = Heartbeats(leases)
    beat = heartbeats.hold(taken, 1.0)
    try:
        assert abs(beat.deadline - (taken.taken_at + TTL)) < 1e-6
        assert beat.next_renewal <= time.monotonic()  # overdue: renewed at once
    finally:
        heartbeats.drop(beat)


def test_a_lease_that_ran_out_before_its_heartbeat_started_is_lost_at_confirm() -> None:
    clock = Clock()
    leases = MemoryLeases(clock)
    lease = leases.acquire("k", TTL)
    assert lease is not None
    clock.now += TTL + 1  # the store let it go while the process was elsewhere
    stalled = dataclasses.replace(lease, taken_at=time.monotonic() - TTL - 1)
    heartbeats = Heartbeats(leases)
    beat = heartbeats.hold(stalled, TTL / 3)
    try:
        assert not heartbeats.confirm(beat)
    finally:
        heartbeats.drop(beat)


def test_a_lease_held_at_once_is_trusted_for_its_ttl() -> None:
    leases = MemoryLeases()
    lease = leases.acquire("k", TTL)
    assert lease is not None
    heartbeats = Heartbeats(leases)
    beat = heartbeats.hold(lease, TTL / 3)
    try:
        assert beat.deadline > time.monotonic() + TTL - 1
        assert heartbeats.confirm(beat)
    finally:
        heartbeats.drop(beat)
