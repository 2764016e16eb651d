"""kombu's Redis transport, keeping one Redis client per channel.

kombu wraps its connection pool in a new ``redis.Redis`` object for every publish and
every ack (``Channel._create_client``). Building one costs about 0.3 ms of CPU with
redis-py 8, more than sending the command (profiled under bench/chain.py). The object
holds no connection of its own, only the pool, so one per channel sends the same
commands over the same connections; it is dropped whenever kombu drops the pool (close,
fork, reconnect). The messages on the wire are kombu's own: Flower and plain Celery
producers with the stock transport share the queues unchanged.

It packs each BRPOP once: with a Redis list per priority level — 89 of them for each
queue — kombu building the command's keys and packing it again before every poll was 40%
of a worker's main process's CPU under a fan-out (profiled under bench/step_profile.py);
the command is the same one, sent from a cache per order of the queues.

It also takes kombu priorities up to :data:`cairn.workers.fairness.LEVELS` - 1 (kombu caps
them at 9): node messages are ordered by their run's priority and their namespace's share
(:mod:`cairn.workers.fairness`), one Redis list per level, the lowest served first.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from kombu.transport import redis as kombu_redis

from cairn.workers.fairness import LEVELS


class Channel(kombu_redis.Channel):
    _cairn_client: Any = None
    max_priority = LEVELS - 1

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        if self._cairn_client is None:
            self._cairn_client = super()._create_client(asynchronous=False)
        return self._cairn_client

    def _brpop_start(self, timeout: float | None = None) -> None:
        """kombu's, with the packed command kept per order of the queues (the queue
        cycle rotates them) and timeout."""
        if timeout is None:
            timeout = self.brpop_timeout
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return
        connection = self.client.connection
        packed = self._brpops().get((*queues, timeout))
        if packed is None:
            keys = [self._q_for_pri(queue, pri) for pri in self.priority_steps for queue in queues]
            command = ["BRPOP", *keys, timeout or 0]
            if self.global_keyprefix:
                command = self.client._prefix_args(command)
            packed = self._brpops()[(*queues, timeout)] = connection.pack_command(*command)
        self._in_poll = connection
        self._brpop_sent_at = monotonic()  # type: ignore[assignment]  # kombu declares None
        connection.send_packed_command(packed)

    def _brpops(self) -> dict[tuple[Any, ...], Any]:
        cache: dict[tuple[Any, ...], Any] = self.__dict__.setdefault("_cairn_brpops", {})
        return cache

    def _disconnect_pools(self) -> None:
        self._cairn_client = None
        super()._disconnect_pools()

    def close(self) -> None:
        self._cairn_client = None
        super().close()


class Transport(kombu_redis.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
