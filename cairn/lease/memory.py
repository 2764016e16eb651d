"""Leases in this process's memory, with the same semantics as Redis's (a monotonic
clock, injectable): the embedded default's and the unit tests' twin."""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cairn.lease import port
from cairn.lease.port import (
    CHUNKS_KEPT,
    CHUNKS_PER_READ,
    FINISHED_FENCE_TTL_MS,
    Handed,
    Lapsed,
    Lease,
    decoded,
    step_fields,
    step_histograms,
)
from cairn.lease.waits import SUM_FIELD, WaitHistogram, bucket_field, current_wait


class MemoryLeases:
    """Leases in this process's memory, with the same semantics (a monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.RLock()  # hand_on holds it across a release and an acquire
        self._leases: dict[str, tuple[str, float]] = {}
        self._claims: dict[str, float] = {}  # lease key -> when its lease runs out
        self._beats: dict[str, dict[str, Any]] = {}
        self._fences: dict[str, int] = {}
        self._finished: deque[tuple[float, str]] = deque()  # (forget its fence at, key)
        self._stats: dict[str, int] = {}
        self._waits: dict[str, float] = {}
        self._steps: dict[str, float] = {}
        self._stop_watchers: list[Callable[[str], None]] = []
        self._chunks: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self._chunk_added = threading.Condition(self._lock)
        self._chunk_count = 0

    def _live(self, key: str) -> tuple[str, float] | None:
        entry = self._leases.get(key)
        if entry is not None and entry[1] <= self._clock():
            del self._leases[key]
            return None
        return entry

    def acquire(
        self,
        key: str,
        ttl_s: float,
        record: Mapping[str, Any] | None = None,
        floor: int = 0,
        attempt: int = 1,
    ) -> Lease | None:
        with self._lock:
            held = self._live(key)
            superseded = False
            if held is not None:
                theirs = held[0].partition(":")[0]
                if not (theirs.isdigit() and attempt > int(theirs)):
                    self._count("contended")
                    return None
                self._count("superseded")
                superseded = True
            self._count("acquired")
            wait_s = current_wait()
            if wait_s is not None:
                field = bucket_field(wait_s)
                self._waits[field] = self._waits.get(field, 0) + 1
                self._waits[SUM_FIELD] = self._waits.get(SUM_FIELD, 0.0) + wait_s
            now = self._clock()
            while self._finished and self._finished[0][0] <= now:
                expired = self._finished.popleft()[1]
                if self._live(expired) is None:
                    self._fences.pop(expired, None)
            token = f"{attempt}:{secrets.token_hex(16)}"
            fence = self._fences[key] = max(self._fences.get(key, 0), floor) + 1
            orphaned = key in self._beats and not superseded
            # Unreleased, its lease gone: its holder was lost (see acquire.lua).
            lapsed = orphaned or (key in self._claims and not superseded)
            self._leases[key] = (token, self._clock() + ttl_s)
            self._claims[key] = self._clock() + ttl_s
            now = self._clock()
            self._beats[key] = {
                **(record or {}),
                "beat_at": now,
                "started_at": now,
                "progress_at": now,
                "fence": fence,
            }
            return Lease(key, token, ttl_s, fence, orphaned, attempt, superseded, lapsed)

    def renew(self, lease: Lease, record: Mapping[str, Any] | None = None) -> bool:
        return self._touch(lease, record, renew=True, progressed=False)

    def beat(self, lease: Lease, record: Mapping[str, Any], progressed: bool = False) -> bool:
        return self._touch(lease, record, renew=False, progressed=progressed)

    def _touch(
        self, lease: Lease, record: Mapping[str, Any] | None, *, renew: bool, progressed: bool
    ) -> bool:
        with self._lock:
            entry = self._live(lease.key)
            if entry is None or entry[0] != lease.token:
                self._count("lost")
                return False
            now = self._clock()
            if renew:
                self._count("renewed")
                self._leases[lease.key] = (lease.token, now + lease.ttl_s)
                self._claims[lease.key] = now + lease.ttl_s
            self._beats[lease.key] = {
                **self._beats.get(lease.key, {}),
                **(record or {}),
                "beat_at": now,
                **({"progress_at": now} if progressed else {}),
            }
            if progressed:
                self._beats[lease.key].pop("stalled", None)
            return True

    def lapsed(self, limit: int) -> list[Lapsed]:
        with self._lock:
            now = self._clock()
            taken: list[Lapsed] = []
            for key, expires in sorted(self._claims.items(), key=lambda item: item[1]):
                if len(taken) >= limit or expires > now:
                    break
                live = self._live(key)
                if live is not None:
                    self._claims[key] = live[1]
                    continue
                self._claims[key] = now + port.LAPSED_HOLD_S
                record = self._beats.pop(key, None)
                taken.append(Lapsed(key, decoded(record, None) if record else None))
            return taken

    def settle_lapsed(self, key: str) -> None:
        with self._lock:
            if self._live(key) is None:
                self._claims.pop(key, None)

    def claims(self) -> list[str]:
        with self._lock:
            return list(self._claims)

    def flag_stalled(self, key: str) -> bool:
        with self._lock:
            record = self._beats.get(key)
            if record is None or record.get("stalled"):
                return False
            record["stalled"] = "1"
            return True

    def append_chunks(self, run_id: str, chunks: Sequence[Mapping[str, Any]]) -> None:
        with self._chunk_added:
            log = self._chunks.setdefault(run_id, [])
            for chunk in chunks:
                self._chunk_count += 1
                log.append((f"{self._chunk_count}-0", dict(chunk)))
            del log[: max(0, len(log) - CHUNKS_KEPT)]
            self._chunk_added.notify_all()

    def read_chunks(
        self, run_id: str, after: str, block_s: float = 0.0
    ) -> list[tuple[str, dict[str, Any]]]:
        floor = int(after.partition("-")[0] or 0)

        def newer() -> list[tuple[str, dict[str, Any]]]:
            log = self._chunks.get(run_id, [])
            return [e for e in log if int(e[0].partition("-")[0]) > floor][:CHUNKS_PER_READ]

        with self._chunk_added:
            found = newer()
            if not found and block_s > 0:
                self._chunk_added.wait(block_s)
                found = newer()
            return found

    def announce_stops(self, keys: Sequence[str]) -> None:
        for key in keys:
            for on_stop in list(self._stop_watchers):
                on_stop(key)

    def watch_stops(self, on_stop: Callable[[str], None]) -> None:
        self._stop_watchers.append(on_stop)

    def release(
        self, lease: Lease, finished: bool = False, timings: Mapping[str, float] | None = None
    ) -> bool:
        with self._lock:
            fields = step_fields(timings)
            for field, amount in zip(fields[::2], fields[1::2], strict=True):
                self._steps[field] = self._steps.get(field, 0.0) + amount
            entry = self._live(lease.key)
            if entry is None or entry[0] != lease.token:
                return False
            del self._leases[lease.key]
            self._beats.pop(lease.key, None)
            self._claims.pop(lease.key, None)
            if finished:
                self._finished.append((self._clock() + FINISHED_FENCE_TTL_MS / 1000, lease.key))
            return True

    def hand_on(
        self,
        lease: Lease,
        key: str,
        ttl_s: float,
        *,
        timings: Mapping[str, float] | None = None,
        record: Mapping[str, Any] | None = None,
        attempt: int = 1,
    ) -> Handed:
        with self._lock:
            self.release(lease, finished=True, timings=timings)
            return Handed(self.acquire(key, ttl_s, record, attempt=attempt))

    def count(self, name: str) -> None:
        with self._lock:
            self._count(name)

    def add(self, counts: Mapping[str, int]) -> None:
        with self._lock:
            for name, by in counts.items():
                self._count(name, by)

    def held(self, key: str) -> bool:
        with self._lock:
            return self._live(key) is not None

    def token_of(self, key: str) -> str | None:
        """The token of the live lease on ``key`` (None: no live lease)."""
        with self._lock:
            entry = self._live(key)
            return None if entry is None else entry[0]

    def forget(self, key: str) -> bool:
        with self._lock:
            if self._live(key) is not None:
                return False
            self._beats.pop(key, None)
            if key in self._claims:
                self._claims[key] = self._clock() + port.LAPSED_HOLD_S
            return True

    def _count(self, name: str, by: int = 1) -> None:
        self._stats[name] = self._stats.get(name, 0) + by

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)

    def waits(self) -> WaitHistogram:
        with self._lock:
            return WaitHistogram.from_fields(self._waits)

    def step_times(self) -> dict[str, WaitHistogram]:
        with self._lock:
            return step_histograms(self._steps)

    def running(self) -> list[dict[str, Any]]:
        keys = list(self._beats)
        return [
            {"lease": key, **record}
            for key, record in zip(keys, self.beats(keys), strict=True)
            if record
        ]

    def beats(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        with self._lock:
            now = self._clock()
            return [decoded(self._beats[key], now) if key in self._beats else None for key in keys]
