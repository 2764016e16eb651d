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

:class:`MemoryLeases` is the in-process twin for the embedded default and unit tests.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from cairn.lease.waits import (
    STEP_BUCKETS_S,
    SUM_FIELD,
    WaitHistogram,
    bucket_field,
    current_wait,
)
from cairn.model.keys import beat_key, fence_key

BEAT_TTL_PERIODS = 3
CLAIMS_KEY = "cairn:claims"  # every live claim's lease key, scored by its expiry (ms, Redis)
STATS_KEY = "cairn:stats:leases"  # fleet-wide counters, kept by the scripts themselves
WAIT_KEY = "cairn:stats:lease_wait"  # fleet-wide lease wait histogram: count per bucket, sum
# Fleet-wide histograms of the parts of a step its holder timed (execution, commit), as
# "<part>:<bucket>" counts and "<part>:sum", added to by the release.
STEP_KEY = "cairn:stats:step"
STEP_PARTS = ("execution", "commit")
# The fence counter outlives leases (a stale holder may wake up much later). Once the
# result is committed it is kept a while longer, not deleted: a worker that read the
# execution as unfinished just before that commit must still get a fence above 1, whose
# claim PostgreSQL then refuses — else it would take the free lease as a first claim and
# run the finished node again.
FENCE_TTL_MS = 7 * 24 * 3600 * 1000
FINISHED_FENCE_TTL_MS = 10 * 60 * 1000

# KEYS: lease, beat, stats, fence, waits, claims. ARGV: token ("<attempt>:<random>"),
# ttl_ms, beat_ttl_ms, floor, fence_ttl_ms, wait bucket ('' if the wait is unknown),
# wait_s, field, value, ... Returns {the claim's fence (0 if the lease is held), 1 if a
# dead holder's heartbeat record was there, 1 if an older attempt's lease was superseded}.
ACQUIRE = """
local superseded = 0
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local mine = tonumber(string.match(ARGV[1], '^(%d+):'))
  local theirs = tonumber(string.match(redis.call('get', KEYS[1]) or '', '^(%d+):'))
  if not (mine and theirs and mine > theirs) then
    redis.call('hincrby', KEYS[3], 'contended', 1)
    return {0, 0, 0}
  end
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('hincrby', KEYS[3], 'superseded', 1)
  superseded = 1
end
redis.call('hincrby', KEYS[3], 'acquired', 1)
if ARGV[6] ~= '' then
  redis.call('hincrby', KEYS[5], ARGV[6], 1)
  redis.call('hincrbyfloat', KEYS[5], 'sum', ARGV[7])
end
local fence = redis.call('incr', KEYS[4])
if fence <= tonumber(ARGV[4]) then
  fence = tonumber(ARGV[4]) + 1
  redis.call('set', KEYS[4], fence)
end
redis.call('pexpire', KEYS[4], ARGV[5])
local t = redis.call('time')
local now = string.format('%d.%06d', t[1], t[2])
-- A superseded attempt's record is its own, not a dead holder's.
local orphaned = redis.call('del', KEYS[2])
if superseded == 1 then orphaned = 0 end
redis.call('hset', KEYS[2], 'beat_at', now, 'started_at', now, 'progress_at', now,
  'fence', fence, unpack(ARGV, 8))
redis.call('pexpire', KEYS[2], ARGV[3])
redis.call('zadd', KEYS[6], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), KEYS[1])
return {fence, orphaned, superseded}
"""

# KEYS: lease, beat, stats, claims. ARGV: token, ttl_ms (0: a beat, no renewal),
# beat_ttl_ms, "1" if the handler made progress, field, value, ...
RENEW = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  redis.call('hincrby', KEYS[3], 'lost', 1)
  return 0
end
local t = redis.call('time')
if tonumber(ARGV[2]) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('hincrby', KEYS[3], 'renewed', 1)
  redis.call('zadd', KEYS[4], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), KEYS[1])
end
local now = string.format('%d.%06d', t[1], t[2])
redis.call('hset', KEYS[2], 'beat_at', now, unpack(ARGV, 5))
if ARGV[4] == '1' then
  redis.call('hset', KEYS[2], 'progress_at', now)
  redis.call('hdel', KEYS[2], 'stalled')
end
redis.call('pexpire', KEYS[2], ARGV[3])
return 1
"""

# KEYS: lease, beat, fence, step histograms, claims. ARGV: token, "1" if the holder's
# result is committed, the fence's remaining life then (ms), then (histogram field,
# amount) pairs.
RELEASE = """
for i = 4, #ARGV, 2 do
  redis.call('hincrbyfloat', KEYS[4], ARGV[i], ARGV[i + 1])
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[2])
  redis.call('zrem', KEYS[5], KEYS[1])
  if ARGV[2] == '1' then
    redis.call('pexpire', KEYS[3], ARGV[3])
  end
  return redis.call('del', KEYS[1])
end
return 0
"""

# KEYS: claims. ARGV: limit, hold_ms. Takes the claims whose lease ran out unreleased,
# each with its heartbeat record, which goes: whoever takes a lapsed claim — this or a
# worker's acquire, which finds the record — is the one that counts the death. The claim
# itself is only put hold_ms ahead, until the taker has dealt with it (SETTLE_LAPSED): a
# scheduler that dies meanwhile leaves it to be taken again. The beat key is derived
# from the lease key, so this needs one Redis, not a cluster.
TAKE_LAPSED = """
local t = redis.call('time')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local due = redis.call('zrangebyscore', KEYS[1], '-inf', now_ms, 'LIMIT', 0, ARGV[1])
local taken = {}
for _, lease in ipairs(due) do
  local left = redis.call('pttl', lease)
  if left > 0 then
    redis.call('zadd', KEYS[1], now_ms + left, lease)  -- still held: its score was behind
  else
    local beat = 'cairn:beat:' .. string.sub(lease, string.len('cairn:lease:') + 1)
    local record = redis.call('hgetall', beat)
    redis.call('del', beat)
    redis.call('zadd', KEYS[1], now_ms + tonumber(ARGV[2]), lease)
    table.insert(taken, {lease, record})
  end
end
return taken
"""

# KEYS: claims, lease. A lapsed claim dealt with leaves the set — unless a new holder
# has claimed the lease since (its claim is the member now).
SETTLE_LAPSED = """
if redis.call('exists', KEYS[2]) == 0 then
  return redis.call('zrem', KEYS[1], KEYS[2])
end
return 0
"""
LAPSED_HOLD_S = 30.0  # a taken claim comes back after this unless settled


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


@dataclass(frozen=True)
class Lapsed:
    """A claim whose lease ran out without being released, as :meth:`Leases.lapsed`
    takes it: the lease key, and the heartbeat record its holder left (None if gone)."""

    key: str
    record: dict[str, Any] | None


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
        (the newest fence PostgreSQL recorded) and above every earlier claim's."""
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
        """A lapsed claim taken by :meth:`lapsed` has been dealt with."""
        ...

    def claims(self) -> list[str]:
        """The lease keys of every claim not yet released nor taken as lapsed."""
        ...

    def flag_stalled(self, key: str) -> bool:
        """Mark a live claim's heartbeat record stalled; True if it was not already (the
        flag goes with the next progress)."""
        ...

    def release(
        self, lease: Lease, finished: bool = False, timings: Mapping[str, float] | None = None
    ) -> bool:
        """Give the lease up (token-checked); ``finished``: the holder's result is
        committed, so the execution's fence counter is needed no more. ``timings``: the
        seconds the step's parts took (:data:`STEP_PARTS`), counted into the fleet's
        histograms in the same round trip."""
        ...

    def count(self, name: str) -> None:
        """Add one to a fleet-wide counter (shown with the lease counters)."""
        ...

    def held(self, key: str) -> bool: ...

    def beats(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        """The heartbeat records of these leases, each with ``age_s`` by the lease clock."""
        ...

    def running(self) -> list[dict[str, Any]]:
        """Every heartbeat record in the fleet, each with its lease key."""
        ...

    def forget(self, key: str) -> None:
        """Drop the heartbeat record and claim of a lease nobody holds (after a
        recovery)."""
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


class RedisLeases:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)
        self._take_lapsed = client.register_script(TAKE_LAPSED)
        self._settle_lapsed = client.register_script(SETTLE_LAPSED)

    @classmethod
    def from_url(cls, url: str) -> RedisLeases:
        return cls(
            redis.Redis.from_url(
                url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30
            )
        )

    def acquire(
        self,
        key: str,
        ttl_s: float,
        record: Mapping[str, Any] | None = None,
        floor: int = 0,
        attempt: int = 1,
    ) -> Lease | None:
        token = f"{attempt}:{secrets.token_hex(16)}"
        wait_s = current_wait()
        args: list[str | int | float] = [
            token,
            _ms(ttl_s),
            _ms(ttl_s * BEAT_TTL_PERIODS),
            floor,
            FENCE_TTL_MS,
            "" if wait_s is None else bucket_field(wait_s),
            0 if wait_s is None else round(wait_s, 6),
            *_flat(record),
        ]
        keys = [key, beat_key(key), STATS_KEY, fence_key(key), WAIT_KEY, CLAIMS_KEY]
        fence, orphaned, superseded = self._acquire(keys=keys, args=args)
        if not fence:
            return None
        return Lease(key, token, ttl_s, int(fence), bool(orphaned), attempt, bool(superseded))

    def renew(self, lease: Lease, record: Mapping[str, Any] | None = None) -> bool:
        return self._touch(lease, _ms(lease.ttl_s), record, progressed=False)

    def beat(self, lease: Lease, record: Mapping[str, Any], progressed: bool = False) -> bool:
        return self._touch(lease, 0, record, progressed=progressed)

    def _touch(
        self, lease: Lease, ttl_ms: int, record: Mapping[str, Any] | None, *, progressed: bool
    ) -> bool:
        args: list[str | int] = [
            lease.token,
            ttl_ms,
            _ms(lease.ttl_s * BEAT_TTL_PERIODS),
            "1" if progressed else "0",
            *_flat(record),
        ]
        keys = [lease.key, beat_key(lease.key), STATS_KEY, CLAIMS_KEY]
        return bool(self._renew(keys=keys, args=args))

    def lapsed(self, limit: int) -> list[Lapsed]:
        taken = self._take_lapsed(keys=[CLAIMS_KEY], args=[limit, _ms(LAPSED_HOLD_S)])
        return [
            Lapsed(
                key.decode(),
                _decoded(dict(zip(flat[::2], flat[1::2], strict=True)), None) if flat else None,
            )
            for key, flat in taken
        ]

    def settle_lapsed(self, key: str) -> None:
        self._settle_lapsed(keys=[CLAIMS_KEY, key])

    def claims(self) -> list[str]:
        keys: list[bytes] = self.client.zrange(CLAIMS_KEY, 0, -1)  # type: ignore[assignment]
        return [key.decode() for key in keys]

    def flag_stalled(self, key: str) -> bool:
        beat = beat_key(key)
        return bool(self.client.exists(beat) and self.client.hsetnx(beat, "stalled", "1"))

    def release(
        self, lease: Lease, finished: bool = False, timings: Mapping[str, float] | None = None
    ) -> bool:
        keys = [lease.key, beat_key(lease.key), fence_key(lease.key), STEP_KEY, CLAIMS_KEY]
        args: list[str | int | float] = [
            lease.token,
            "1" if finished else "0",
            FINISHED_FENCE_TTL_MS,
            *_step_fields(timings),
        ]
        return bool(self._release(keys=keys, args=args))

    def count(self, name: str) -> None:
        self.client.hincrby(STATS_KEY, name, 1)

    def held(self, key: str) -> bool:
        return bool(self.client.exists(key))

    def stats(self) -> dict[str, int]:
        counters: dict[bytes, bytes] = self.client.hgetall(STATS_KEY)  # type: ignore[assignment]
        return {k.decode(): int(v) for k, v in counters.items()}

    def waits(self) -> WaitHistogram:
        fields: dict[bytes, bytes] = self.client.hgetall(WAIT_KEY)  # type: ignore[assignment]
        return WaitHistogram.from_fields({k.decode(): float(v) for k, v in fields.items()})

    def step_times(self) -> dict[str, WaitHistogram]:
        fields: dict[bytes, bytes] = self.client.hgetall(STEP_KEY)  # type: ignore[assignment]
        return _step_histograms({k.decode(): float(v) for k, v in fields.items()})

    def forget(self, key: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(beat_key(key))
        pipe.zrem(CLAIMS_KEY, key)
        pipe.execute()

    def running(self) -> list[dict[str, Any]]:
        """Every heartbeat record in the fleet (a SCAN: for operators, not the hot path)."""
        keys = [
            key.decode().replace("cairn:beat:", "cairn:lease:", 1)
            for key in self.client.scan_iter(match="cairn:beat:*", count=1000)
        ]
        records = self.beats(keys)
        return [
            {"lease": key, **record}
            for key, record in zip(keys, records, strict=True)
            if record is not None
        ]

    def beats(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for key in keys:
            pipe.hgetall(beat_key(key))
        now_parts, *records = pipe.execute()
        now = now_parts[0] + now_parts[1] / 1_000_000
        return [_decoded(record, now) if record else None for record in records]


class MemoryLeases:
    """Leases in this process's memory, with the same semantics (a monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._leases: dict[str, tuple[str, float]] = {}
        self._claims: dict[str, float] = {}  # lease key -> when its lease runs out
        self._beats: dict[str, dict[str, Any]] = {}
        self._fences: dict[str, int] = {}
        self._finished: deque[tuple[float, str]] = deque()  # (forget its fence at, key)
        self._stats: dict[str, int] = {}
        self._waits: dict[str, float] = {}
        self._steps: dict[str, float] = {}

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
            self._leases[key] = (token, self._clock() + ttl_s)
            self._claims[key] = self._clock() + ttl_s
            now = self._clock()
            orphaned = key in self._beats and not superseded
            self._beats[key] = {
                **(record or {}),
                "beat_at": now,
                "started_at": now,
                "progress_at": now,
                "fence": fence,
            }
            return Lease(key, token, ttl_s, fence, orphaned, attempt, superseded)

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
                self._claims[key] = now + LAPSED_HOLD_S
                record = self._beats.pop(key, None)
                taken.append(Lapsed(key, _decoded(record, None) if record else None))
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

    def release(
        self, lease: Lease, finished: bool = False, timings: Mapping[str, float] | None = None
    ) -> bool:
        with self._lock:
            fields = _step_fields(timings)
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

    def count(self, name: str) -> None:
        with self._lock:
            self._count(name)

    def held(self, key: str) -> bool:
        with self._lock:
            return self._live(key) is not None

    def forget(self, key: str) -> None:
        with self._lock:
            self._beats.pop(key, None)
            self._claims.pop(key, None)

    def _count(self, name: str) -> None:
        self._stats[name] = self._stats.get(name, 0) + 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)

    def waits(self) -> WaitHistogram:
        with self._lock:
            return WaitHistogram.from_fields(self._waits)

    def step_times(self) -> dict[str, WaitHistogram]:
        with self._lock:
            return _step_histograms(self._steps)

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
            return [_decoded(self._beats[key], now) if key in self._beats else None for key in keys]


def _step_fields(timings: Mapping[str, float] | None) -> list[Any]:
    """(field, amount) pairs, flat, adding each timed part to its histogram."""
    fields: list[Any] = []
    for part, seconds in (timings or {}).items():
        if part in STEP_PARTS and seconds is not None and seconds >= 0:
            bucket = bucket_field(seconds, STEP_BUCKETS_S)
            fields += [f"{part}:{bucket}", 1, f"{part}:{SUM_FIELD}", round(seconds, 6)]
    return fields


def _step_histograms(fields: Mapping[str, float]) -> dict[str, WaitHistogram]:
    by_part: dict[str, dict[str, float]] = {part: {} for part in STEP_PARTS}
    for field, value in fields.items():
        part, _, label = field.partition(":")
        if part in by_part:
            by_part[part][label] = value
    return {
        part: WaitHistogram.from_fields(found, STEP_BUCKETS_S) for part, found in by_part.items()
    }


def _flat(record: Mapping[str, Any] | None) -> list[str]:
    return [str(item) for pair in (record or {}).items() for item in pair]


def _decoded(record: Mapping[Any, Any], now: float | None) -> dict[str, Any]:
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


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
