"""Leases in Redis: the fleet's. Every operation is one Lua script (``scripts/*.lua``,
each headed by its keys and arguments), so a claim, its heartbeat record, its place in
the claims set and the fleet's counters change together, in one round trip; expiry is
judged by Redis's clock alone."""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import redis

from cairn.lease import port
from cairn.lease.port import (
    BEAT_TTL_PERIODS,
    CHUNKS_KEPT,
    CHUNKS_PER_READ,
    CHUNKS_TTL_S,
    FENCE_TTL_MS,
    FINISHED_FENCE_TTL_MS,
    Handing,
    Lapsed,
    Lease,
    decoded,
    flat,
    ms,
    step_fields,
    step_histograms,
)
from cairn.lease.waits import WaitHistogram, bucket_field, current_wait
from cairn.model.keys import beat_key, fence_key

log = logging.getLogger(__name__)

CHUNKS_PREFIX = "cairn:chunks:"  # a run's live chunk log (a capped stream)

CLAIMS_KEY = "cairn:claims"  # every live claim's lease key, scored by its expiry (ms, Redis)
STATS_KEY = "cairn:stats:leases"  # fleet-wide counters, kept by the scripts themselves
WAIT_KEY = "cairn:stats:lease_wait"  # fleet-wide lease wait histogram: count per bucket, sum
# Fleet-wide histograms of the parts of a step its holder timed (execution, commit), as
# "<part>:<bucket>" counts and "<part>:sum", added to by the release.
STEP_KEY = "cairn:stats:step"


def _script(name: str) -> str:
    return resources.files("cairn.lease").joinpath("scripts", f"{name}.lua").read_text()


ACQUIRE, RENEW, RELEASE = _script("acquire"), _script("renew"), _script("release")
TAKE_LAPSED, SETTLE_LAPSED = _script("take_lapsed"), _script("settle_lapsed")
FORGET = _script("forget")
# A release and then an acquire, in one script: each body as a function of its own keys
# and arguments; ARGV[1] says how many of the rest are the release's (its keys are 5).
HAND_ON = f"""local function release(KEYS, ARGV)
{RELEASE}
end
local function acquire(KEYS, ARGV)
{ACQUIRE}
end
local released = tonumber(ARGV[1])
release({{unpack(KEYS, 1, 5)}}, {{unpack(ARGV, 2, 1 + released)}})
return acquire({{unpack(KEYS, 6)}}, {{unpack(ARGV, 2 + released)}})
"""


class RedisLeases:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        # Pub/sub channels are server-wide, not per database: name this database's.
        self._stops_channel = f"cairn:stops:{client.connection_pool.connection_kwargs.get('db', 0)}"
        self._stop_watchers: list[Callable[[str], None]] = []
        self._watching_pid: int | None = None
        self._watch_lock = threading.Lock()
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)
        self._take_lapsed = client.register_script(TAKE_LAPSED)
        self._settle_lapsed = client.register_script(SETTLE_LAPSED)
        self._forget = client.register_script(FORGET)
        self._hand_on = client.register_script(HAND_ON)

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
        keys, args = _acquiring(key, token, ttl_s, record, floor)
        asked = time.monotonic()
        answer = self._acquire(keys=keys, args=args)
        return _claimed(key, token, ttl_s, attempt, answer, asked=asked)

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
        token = f"{attempt}:{secrets.token_hex(16)}"
        released_keys, released_args = _releasing(lease, True, timings)
        keys, args = _acquiring(key, token, ttl_s, record, 0)
        asked = time.monotonic()
        answer = self._sent(
            self._hand_on,
            [*released_keys, *keys],
            [len(released_args), *released_args, *args],
        )
        return _InFlight(lambda: _claimed(key, token, ttl_s, attempt, answer(), asked=asked))

    def _sent(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Callable[[], Any]:
        """``script`` called on a connection of its own, its answer read by the callable
        returned (which gives the connection back). A script the server does not have
        yet — flushed, or restarted — is loaded and run when the answer is read: it
        did not run."""
        client: Any = self.client  # the connection-level calls are untyped
        pool = client.connection_pool
        connection = pool.get_connection()
        try:
            connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except BaseException:
            connection.disconnect()
            pool.release(connection)
            raise

        def answer() -> Any:
            try:
                return client.parse_response(connection, "EVALSHA")
            except redis.exceptions.NoScriptError:
                return script(keys=keys, args=args)
            except BaseException:
                connection.disconnect()  # its answer unread: not to be reused
                raise
            finally:
                pool.release(connection)

        return answer

    def renew(self, lease: Lease, record: Mapping[str, Any] | None = None) -> bool:
        return self._touch(lease, ms(lease.ttl_s), record, progressed=False)

    def beat(self, lease: Lease, record: Mapping[str, Any], progressed: bool = False) -> bool:
        return self._touch(lease, 0, record, progressed=progressed)

    def _touch(
        self, lease: Lease, ttl_ms: int, record: Mapping[str, Any] | None, *, progressed: bool
    ) -> bool:
        args: list[str | int] = [
            lease.token,
            ttl_ms,
            ms(lease.ttl_s * BEAT_TTL_PERIODS),
            "1" if progressed else "0",
            *flat(record),
        ]
        keys = [lease.key, beat_key(lease.key), STATS_KEY, CLAIMS_KEY]
        return bool(self._renew(keys=keys, args=args))

    def lapsed(self, limit: int) -> list[Lapsed]:
        taken = self._take_lapsed(keys=[CLAIMS_KEY], args=[limit, ms(port.LAPSED_HOLD_S)])
        return [
            Lapsed(
                key.decode(),
                decoded(dict(zip(flat[::2], flat[1::2], strict=True)), None) if flat else None,
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

    def append_chunks(self, run_id: str, chunks: Sequence[Mapping[str, Any]]) -> None:
        if not chunks:
            return
        key = f"{CHUNKS_PREFIX}{run_id}"
        adding = self.client.pipeline(transaction=False)
        for chunk in chunks:
            adding.xadd(
                key,
                {"chunk": json.dumps(chunk, separators=(",", ":"))},
                maxlen=CHUNKS_KEPT,
                approximate=True,
            )
        adding.expire(key, CHUNKS_TTL_S)
        adding.execute()

    def read_chunks(
        self, run_id: str, after: str, block_s: float = 0.0
    ) -> list[tuple[str, dict[str, Any]]]:
        key = f"{CHUNKS_PREFIX}{run_id}"
        block = int(block_s * 1000) if block_s > 0 else None
        found: Any = self.client.xread({key: after}, count=CHUNKS_PER_READ, block=block)
        return [
            (entry_id.decode(), json.loads(fields[b"chunk"]))
            for _stream, entries in found or []
            for entry_id, fields in entries
        ]

    def announce_stops(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        publishing = self.client.pipeline(transaction=False)
        for key in keys:
            publishing.publish(self._stops_channel, key)
        publishing.execute()

    def watch_stops(self, on_stop: Callable[[str], None]) -> None:
        with self._watch_lock:
            if self._watching_pid != os.getpid():  # none yet, or a parent's before a fork
                self._stop_watchers = []
                self._watching_pid = os.getpid()
                threading.Thread(target=self._watch, name="cairn-stops", daemon=True).start()
            self._stop_watchers.append(on_stop)

    def _watch(self) -> None:
        """Listen for announced stops, for as long as the process lives (resubscribing
        after Redis comes back)."""
        while True:
            try:
                pubsub = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                with pubsub as subscription:
                    subscription.subscribe(self._stops_channel)
                    while True:
                        message = subscription.get_message(timeout=1.0)
                        if message is None or message.get("type") != "message":
                            continue
                        key = message["data"].decode()
                        for on_stop in list(self._stop_watchers):
                            on_stop(key)
            except Exception:  # Redis away: heartbeats still ask; listen again soon
                log.warning("listening for announced stops failed; retrying", exc_info=True)
                time.sleep(1.0)

    def release(
        self, lease: Lease, finished: bool = False, timings: Mapping[str, float] | None = None
    ) -> bool:
        keys, args = _releasing(lease, finished, timings)
        return bool(self._release(keys=keys, args=args))

    def count(self, name: str) -> None:
        self.client.hincrby(STATS_KEY, name, 1)

    def add(self, counts: Mapping[str, int]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for name, by in counts.items():
            pipe.hincrby(STATS_KEY, name, by)
        pipe.execute()

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
        return step_histograms({k.decode(): float(v) for k, v in fields.items()})

    def forget(self, key: str) -> bool:
        keys = [CLAIMS_KEY, key, beat_key(key)]
        return bool(self._forget(keys=keys, args=[ms(port.LAPSED_HOLD_S)]))

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
        return [decoded(record, now) if record else None for record in records]


class _InFlight:
    """A hand-on sent, its answer read once, when first asked for."""

    def __init__(self, answer: Callable[[], Lease | None]) -> None:
        self._answer: Callable[[], Lease | None] | None = answer
        self._lease: Lease | None = None
        self._error: BaseException | None = None

    def taken(self) -> Lease | None:
        if self._answer is not None:
            answer, self._answer = self._answer, None
            try:
                self._lease = answer()
            except BaseException as error:
                self._error = error
        if self._error is not None:
            raise self._error
        return self._lease


def _acquiring(
    key: str, token: str, ttl_s: float, record: Mapping[str, Any] | None, floor: int
) -> tuple[list[str], list[str | int | float]]:
    """acquire.lua's keys and arguments (the lease wait from :func:`current_wait`)."""
    wait_s = current_wait()
    args: list[str | int | float] = [
        token,
        ms(ttl_s),
        ms(ttl_s * BEAT_TTL_PERIODS),
        floor,
        FENCE_TTL_MS,
        "" if wait_s is None else bucket_field(wait_s),
        0 if wait_s is None else round(wait_s, 6),
        *flat(record),
    ]
    return [key, beat_key(key), STATS_KEY, fence_key(key), WAIT_KEY, CLAIMS_KEY], args


def _claimed(
    key: str, token: str, ttl_s: float, attempt: int, answer: Any, *, asked: float
) -> Lease | None:
    """The lease acquire.lua's answer gives (None: it is held), its TTL running from
    when it was ``asked`` for."""
    fence, orphaned, superseded, lapsed = answer
    if not fence:
        return None
    return Lease(
        key,
        token,
        ttl_s,
        int(fence),
        bool(orphaned),
        attempt,
        bool(superseded),
        bool(lapsed),
        taken_at=asked,
    )


def _releasing(
    lease: Lease, finished: bool, timings: Mapping[str, float] | None
) -> tuple[list[str], list[str | int | float]]:
    """release.lua's keys and arguments."""
    keys = [lease.key, beat_key(lease.key), fence_key(lease.key), STEP_KEY, CLAIMS_KEY]
    args: list[str | int | float] = [
        lease.token,
        "1" if finished else "0",
        FINISHED_FENCE_TTL_MS,
        *step_fields(timings),
    ]
    return keys, args
