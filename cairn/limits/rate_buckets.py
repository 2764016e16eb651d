"""Rate buckets (the port: :class:`cairn.limits.rates.Rates`): a sliding window per
bucket — never more than a limit's amount in any window of its period — of requests and
of tokens, each reservation held for its call and charged what it used once it is
answered; and a pause a provider's 429 puts on a bucket.

:class:`RedisRates` (``limits/scripts/take_rate.lua``) is the fleet's, by the Redis
server's clock; :class:`MemoryRates` the in-process twin, by this process's monotonic
clock. One contract suite holds them together
(:class:`cairn.testing.rates_contract.RatesContract`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources

import redis

from cairn.limits.rates import Bucket, BucketReport

RATE_PREFIX = "cairn:rate:"  # the bucket's hash: its pause, its limits as last declared
REQUESTS_PREFIX = "cairn:rate-r:"  # sorted set: call -> when its request was taken (ms)
TOKENS_PREFIX = "cairn:rate-t:"  # sorted set: call -> when its tokens were taken (ms)
AMOUNTS_PREFIX = "cairn:rate-a:"  # hash: call -> its tokens


# A unit comes back this much after its period (a share of it, at most GUARD_MAX_MS): a
# provider counts calls as they arrive, and they arrive after their units' time — it must
# never see the limit plus one within a window. A call confirms its units again as its
# request leaves (cairn.limits.departures); one confirming more than half the guard after
# their time is too late for them (they are taken anew): the other half covers the way
# from that confirmation to the provider.
GUARD_SHARE, GUARD_MAX_MS = 0.1, 250


def guard_ms(per_s: float) -> float:
    return min(GUARD_MAX_MS, per_s * 1000 * GUARD_SHARE)


def period_ms(per_s: float) -> int:
    """A declared period as kept, in ms: the period and its guard."""
    return round(per_s * 1000 + guard_ms(per_s))


def leave_within_ms(buckets: Sequence[Bucket]) -> int:
    """How long after its units' time a call may still confirm them (ms): half the
    smallest guard of its limits."""
    guards = [
        guard_ms(rate.per_s)
        for bucket in buckets
        for rate in (bucket.requests, bucket.tokens)
        if rate is not None
    ]
    return int(min(guards, default=0) / 2)


def _limits(bucket: Bucket) -> list[int]:
    """requests limit, period ms, tokens limit, period ms (0: none)."""
    out: list[int] = []
    for rate in (bucket.requests, bucket.tokens):
        out += [rate.amount, period_ms(rate.per_s)] if rate is not None else [0, 0]
    return out


@dataclass
class _Bucket:
    paused: float = 0.0
    limits: tuple[int, int, int, int] = (0, 0, 0, 0)  # as _limits(), periods in ms
    # Units are kept for the longest period any caller declared (ms): requests, tokens.
    kept: tuple[int, int] = (0, 0)
    requests: dict[str, float] = field(default_factory=dict)  # call -> at (s)
    tokens: dict[str, float] = field(default_factory=dict)
    amounts: dict[str, int] = field(default_factory=dict)

    def declare(self, bucket: Bucket) -> None:
        """The limits as this caller declares them."""
        rl, rp, tl, tp = _limits(bucket)
        self.limits = (rl, rp, tl, tp)
        self.kept = (max(rp, self.kept[0]), max(tp, self.kept[1]))

    def requests_free(self, start: float, now: float) -> float:
        """The earliest a request may be taken, from ``start``: once the limit's oldest
        request in the window leaves it, never before the newest (the expired dropped)."""
        rl, rp, _tl, _tp = self.limits
        period = rp / 1000
        for other, when in list(self.requests.items()):
            if when < now - self.kept[0] / 1000:
                del self.requests[other]
        times = sorted(self.requests.values(), reverse=True)
        if len(times) >= rl:
            start = max(start, times[rl - 1] + period)
        if times:
            start = max(start, times[0])
        return start

    def tokens_free(self, start: float, now: float, want: int) -> float:
        """The earliest ``want`` tokens may be taken, from ``start``: once enough of the
        window's tokens leave it, never before the newest (the expired dropped)."""
        _rl, _rp, tl, tp = self.limits
        period = tp / 1000
        for other, when in list(self.tokens.items()):
            if when < now - self.kept[1] / 1000:
                del self.tokens[other]
                self.amounts.pop(other, None)
        newest = sorted(self.tokens.items(), key=lambda item: item[1], reverse=True)
        if newest:
            start = max(start, newest[0][1])
        acc = 0
        for other, when in newest:
            amount = self.amounts.get(other, 0)
            if acc + amount + want > tl:
                start = max(start, when + period)
                break
            acc += amount
        return start

    def reserve(self, call: str, start: float, want: int) -> None:
        """The call's units, at ``start``, under each limit the bucket has."""
        rl, _rp, tl, _tp = self.limits
        if rl:
            self.requests[call] = start
        if tl:
            self.tokens[call] = start
            self.amounts[call] = want

    def forget(self, call: str) -> None:
        """The call's units dropped: given back, or to be taken anew."""
        self.requests.pop(call, None)
        self.tokens.pop(call, None)
        self.amounts.pop(call, None)


class MemoryRates:
    """Rate buckets in this process's memory (the embedded runtime's), by its monotonic
    clock — the same rules as :class:`RedisRates`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def take(self, buckets: Sequence[Bucket], call: str, tokens: int) -> float:
        with self._lock:
            now = self._clock()
            held = [self._buckets.setdefault(b.name, _Bucket()) for b in buckets]
            paused = max((b.paused for b in held), default=0.0)
            at = next(
                (b.requests.get(call, b.tokens.get(call)) for b in held
                 if call in b.requests or call in b.tokens),
                None,
            )  # fmt: skip
            if at is not None:  # a confirmation
                if at <= now:
                    within = leave_within_ms(buckets) / 1000
                    if paused <= now and now - at <= within:
                        return 0.0
                elif paused <= at:
                    return at - now
                for b in held:  # too late for its time, or a pause came after it was given
                    b.forget(call)
            start = max(now, paused)
            wants: list[int] = []
            for bucket, b in zip(buckets, held, strict=True):
                b.declare(bucket)
                rl, _rp, tl, _tp = b.limits
                if rl:
                    start = b.requests_free(start, now)
                wants.append(min(tokens, tl) if tl else 0)
                if tl:
                    start = b.tokens_free(start, now, wants[-1])
            for b, want in zip(held, wants, strict=True):
                b.reserve(call, start, want)
            return start - now

    def settle(self, buckets: Sequence[str], call: str, tokens: int) -> None:
        with self._lock:
            for name in buckets:
                b = self._buckets.get(name)
                if b is not None and call in b.tokens:
                    b.amounts[call] = max(0, tokens)

    def give_back(self, buckets: Sequence[str], call: str) -> None:
        with self._lock:
            for name in buckets:
                b = self._buckets.get(name)
                if b is not None:
                    b.forget(call)

    def pause(self, buckets: Sequence[str], seconds: float) -> None:
        with self._lock:
            until = self._clock() + max(0.0, seconds)
            for name in buckets:
                b = self._buckets.setdefault(name, _Bucket())
                b.paused = max(b.paused, until)

    def report(self, names: Sequence[str] | None = None) -> list[BucketReport]:
        with self._lock:
            now = self._clock()
            chosen = sorted(self._buckets) if names is None else list(names)
            reports = []
            for name in chosen:
                b = self._buckets.get(name)
                if b is None:
                    continue
                rl, rp, tl, tp = b.limits
                if not (rl or tl):  # only paused: nobody took from it yet
                    continue
                used_r = sum(1 for at in b.requests.values() if now - rp / 1000 < at <= now)
                used_t = sum(
                    b.amounts.get(call, 0)
                    for call, at in b.tokens.items()
                    if now - tp / 1000 < at <= now
                )
                waiting = max(
                    sum(1 for at in b.requests.values() if at > now),
                    sum(1 for at in b.tokens.values() if at > now),
                )
                reports.append(_report(name, (rl, rp, used_r, tl, tp, used_t, waiting,
                                              max(0.0, b.paused - now) * 1000)))  # fmt: skip
            return reports


def _report(name: str, values: Sequence[float]) -> BucketReport:
    rl, rp, used_r, tl, tp, used_t, waiting, paused_ms = values
    return BucketReport(
        name,
        int(rl) or None,
        rp / 1000 if rl else None,
        int(used_r),
        int(tl) or None,
        tp / 1000 if tl else None,
        int(used_t),
        int(waiting),
        round(paused_ms / 1000, 3),
    )


def _script(name: str) -> str:
    return resources.files("cairn.limits").joinpath("scripts").joinpath(name).read_text()


PAUSE = """
local t = redis.call('time')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  if tonumber(redis.call('hget', key, 'paused') or '0') < until_ms then
    redis.call('hset', key, 'paused', until_ms)
  end
  if redis.call('pttl', key) < tonumber(ARGV[1]) + 60000 then
    redis.call('pexpire', key, tonumber(ARGV[1]) + 60000)
  end
end
return until_ms
"""
SETTLE = """
for i = 1, #KEYS, 2 do
  if redis.call('zscore', KEYS[i], ARGV[1]) then
    redis.call('hset', KEYS[i + 1], ARGV[1], ARGV[2])
  end
end
return 0
"""


class RedisRates:
    """The fleet's rate buckets in Redis (see the module's docstring)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._take = client.register_script(_script("take_rate.lua"))
        self._report = client.register_script(_script("rate_report.lua"))
        self._pause = client.register_script(PAUSE)
        self._settle = client.register_script(SETTLE)

    @staticmethod
    def _keys(name: str) -> list[str]:
        return [RATE_PREFIX + name, REQUESTS_PREFIX + name, TOKENS_PREFIX + name,
                AMOUNTS_PREFIX + name]  # fmt: skip

    def take(self, buckets: Sequence[Bucket], call: str, tokens: int) -> float:
        if not buckets:
            return 0.0
        keys = [key for bucket in buckets for key in self._keys(bucket.name)]
        args: list[int | str] = [call, max(0, tokens), leave_within_ms(buckets)]
        for bucket in buckets:
            args += _limits(bucket)
        return max(0.0, int(self._take(keys=keys, args=args)) / 1000)

    def settle(self, buckets: Sequence[str], call: str, tokens: int) -> None:
        if buckets:
            keys = [k for name in buckets for k in (TOKENS_PREFIX + name, AMOUNTS_PREFIX + name)]
            self._settle(keys=keys, args=[call, max(0, tokens)])

    def give_back(self, buckets: Sequence[str], call: str) -> None:
        if not buckets:
            return
        with self.client.pipeline(transaction=True) as pipe:
            for name in buckets:
                pipe.zrem(REQUESTS_PREFIX + name, call)
                pipe.zrem(TOKENS_PREFIX + name, call)
                pipe.hdel(AMOUNTS_PREFIX + name, call)
            pipe.execute()

    def pause(self, buckets: Sequence[str], seconds: float) -> None:
        if buckets:
            ms = max(0, round(seconds * 1000))
            self._pause(keys=[RATE_PREFIX + name for name in buckets], args=[ms])

    def report(self, names: Sequence[str] | None = None) -> list[BucketReport]:
        chosen = list(names) if names is not None else self._names()
        if not chosen:
            return []
        values = self._report(keys=[k for name in chosen for k in self._keys(name)])
        reports = []
        for i, name in enumerate(chosen):
            row = [float(v) for v in values[8 * i : 8 * i + 8]]
            if row[0] or row[3]:  # a bucket somebody took from (its limits are known)
                reports.append(_report(name, row))
        return reports

    def _names(self, limit: int = 1000) -> list[str]:
        found: set[str] = set()
        for key in self.client.scan_iter(match=RATE_PREFIX + "*", count=500):
            found.add(key.decode().removeprefix(RATE_PREFIX))
            if len(found) >= limit:
                break
        return sorted(found)
