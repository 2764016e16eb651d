"""The broker's order: run priority first, then each namespace's fair share.

kombu's Redis transport keeps a queue as several lists, one per ``priority_steps`` entry,
and a worker's ``BRPOP`` names them in that order: the list of the **lowest** kombu
priority is served first (kombu 5.7 ``Channel._brpop_start``: ``for pri in
self.priority_steps``; ``_q_for_pri`` maps 0 to the queue's own name). cairn publishes each
node message with a *level* — the lower, the sooner:

    level = 1 + (MAX_PRIORITY - priority) * BANDS + band

- ``priority`` is its run's (-5..5, higher first): every message of a higher-priority run
  is served before any of a lower one's.
- ``band`` (0..BANDS-1) is where its namespace stands in that queue when it is published:
  the n-th message the namespace has waiting, by its weight, goes in band
  ``floor(log2(n / weight))`` (n below its weight: band 0; capped at BANDS - 1). A
  namespace with 20 queued puts them in bands 0-4; one with 2,000 puts its first few
  there too and the rest behind, in bands 5-7 — so the small one's work overtakes the big
  one's backlog and the two are served about alternately at the front of the queue
  (weighted fair queueing, at log-scale resolution: exact where it matters, at the head).
- Level 0, the queue's own list, is what other producers publish with no priority (a
  ``cairn.submit`` from another service, messages from before this version): served first,
  as it was never ordered.

The count n is a Redis hash per queue (``cairn:fair:<queue>``, a field per namespace): a
publish adds its messages in one script call (the one extra round trip a publish costs),
a worker takes one off when it receives a message (the namespace and queue ride in its
``cairn_fair`` header; never below 0), in the transaction its transport makes to hold the
message unacknowledged (:class:`cairn.workers.transport.QoS`): no round trip of its own.
Counts cannot drift for long: the hash expires a ``TTL`` after its last touch, and
whenever the queue is found empty — every scheduler asks each declared queue's length
every 10 s (:meth:`Fairness.backlog`) — it is dropped in the same script that counted the
lists, atomically: an empty queue has nothing waiting for anyone. A message lost (its
count never taken off) or counted twice skews one namespace's bands until then, never its
messages' delivery.

``CAIRN_FAIRNESS=off`` publishes every message in band 0 (first in, first out within a
priority) and makes no Redis call; ``CAIRN_NAMESPACE_WEIGHTS`` gives namespaces shares.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from cairn.model.messages import NodeMessage
from cairn.model.priority import MAX_PRIORITY, MIN_PRIORITY
from cairn.model.workflow_names import DEFAULT_NAMESPACE

log = logging.getLogger(__name__)

BANDS = 8  # a namespace's n-th queued message: band floor(log2(n / weight)), at most 7
LEVELS = 1 + (MAX_PRIORITY - MIN_PRIORITY + 1) * BANDS
PRIORITY_STEPS = list(range(LEVELS))  # kombu's lists of a queue; 0 is the queue itself
FAIR_HEADER = "cairn_fair"  # [queue, namespace]: whose count a worker takes one off
KEY_PREFIX = "cairn:fair:"
TTL_S = 3600  # a queue's counts are forgotten an hour after they were last touched
SEP = "\x06\x16"  # kombu's Redis separator between a queue's name and its level


def level(priority: int, band: int = 0) -> int:
    """The kombu priority a message of a run with ``priority`` goes with, in ``band``."""
    priority = max(MIN_PRIORITY, min(MAX_PRIORITY, priority))
    return 1 + (MAX_PRIORITY - priority) * BANDS + max(0, min(BANDS - 1, band))


def band(count: int, weight: int = 1) -> int:
    """The band of a namespace's ``count``-th queued message, by its ``weight``."""
    share = max(1, count // max(1, weight))
    return min(BANDS - 1, share.bit_length() - 1)


def list_name(queue: str, step: int) -> str:
    """The Redis list kombu keeps a queue's messages of level ``step`` in."""
    return queue if step == 0 else f"{queue}{SEP}{step}"


# KEYS: one counts hash per (queue, namespace) group; ARGV: ttl, then namespace and how
# many for each key. Returns each group's count after adding its messages.
_ADD = """
local counts = {}
for i, key in ipairs(KEYS) do
  counts[i] = redis.call('HINCRBY', key, ARGV[2 * i], tonumber(ARGV[2 * i + 1]))
  redis.call('EXPIRE', key, tonumber(ARGV[1]))
end
return counts
"""

# KEYS[1]: the counts hash; ARGV: namespace, ttl. One message of it left the queue.
TAKE = """
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return left
"""
TAKE_SHA = hashlib.sha1(TAKE.encode(), usedforsecurity=False).hexdigest()


def taken_from(header: object) -> tuple[str, str] | None:
    """For a message received with ``header``: TAKE's key (its queue's counts) and
    namespace, to count it out of the queue. None: published with fairness off, or by
    another producer."""
    if not (
        isinstance(header, list | tuple)
        and len(header) == 2
        and all(isinstance(part, str) and part for part in header)
    ):
        return None
    queue, namespace = header
    return KEY_PREFIX + queue, namespace


# KEYS: the queue's lists, then its counts hash. How many messages wait; none: every
# namespace's count is 0, and the hash goes (in the same atomic step).
_BACKLOG = """
local total = 0
for i = 1, #KEYS - 1 do total = total + redis.call('LLEN', KEYS[i]) end
if total == 0 then redis.call('DEL', KEYS[#KEYS]) end
return total
"""


class Fairness:
    """Levels for node messages, and the per-namespace counts they come from, kept in the
    broker's Redis (``url``; None: no Redis broker, no levels). Its own client, which
    fails at once when Redis is down — as a publish must, so that the relay takes over —
    rather than retrying for seconds as the broker's does while it reconnects."""

    def __init__(
        self, url: str | None, *, enabled: bool, weights: Mapping[str, int] | None = None
    ) -> None:
        self.url = url
        self.leveled = url is not None
        self.enabled = enabled and url is not None
        self.weights = dict(weights or {})
        self._client: Any = None
        self._scripts: dict[str, Any] = {}

    @property
    def client(self) -> Any:
        if self._client is None:
            import redis  # noqa: PLC0415 - only a Redis broker needs it
            from redis.backoff import NoBackoff  # noqa: PLC0415
            from redis.retry import Retry  # noqa: PLC0415

            self._client = redis.Redis.from_url(
                str(self.url),
                socket_connect_timeout=2,
                socket_timeout=5,
                retry=Retry(NoBackoff(), 1),
            )
        return self._client

    def _script(self, source: str) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.client.register_script(source)
        return script

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
            self._scripts.clear()

    def levels(self, messages: Sequence[NodeMessage], default_queue: str) -> list[int]:
        """Each message's level; counted in (one script call) when fairness is on."""
        if not self.enabled or not messages:
            return [level(m.priority) for m in messages]
        groups: dict[tuple[str, str], int] = {}
        for message in messages:
            which = (message.queue or default_queue, message.namespace or DEFAULT_NAMESPACE)
            groups[which] = groups.get(which, 0) + 1
        order = list(groups)
        args: list[Any] = [TTL_S]
        for queue, namespace in order:
            args += [namespace, groups[queue, namespace]]
        counts = self._script(_ADD)(keys=[KEY_PREFIX + q for q, _ in order], args=args)
        # The group's messages are its last ``n`` counted, in publishing order.
        nth = {
            which: int(count) - groups[which] for which, count in zip(order, counts, strict=True)
        }
        levels = []
        for message in messages:
            namespace = message.namespace or DEFAULT_NAMESPACE
            which = (message.queue or default_queue, namespace)
            nth[which] += 1
            levels.append(level(message.priority, band(nth[which], self.weights.get(namespace, 1))))
        return levels

    def header(self, message: NodeMessage, default_queue: str) -> list[str]:
        return [message.queue or default_queue, message.namespace or DEFAULT_NAMESPACE]

    def backlog(self, queue: str) -> int:
        """Messages waiting in ``queue`` (every level); its counts dropped if none."""
        keys = [list_name(queue, step) for step in PRIORITY_STEPS] + [KEY_PREFIX + queue]
        return int(self._script(_BACKLOG)(keys=keys, args=[]))

    def counts(self, queue: str) -> dict[str, int]:
        """Each namespace's count in ``queue`` (for tests and operators)."""
        raw = self.client.hgetall(KEY_PREFIX + queue)
        return {_text(k): int(v) for k, v in raw.items()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
