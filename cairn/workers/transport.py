"""kombu's Redis transport, keeping one Redis client per channel.

kombu wraps its connection pool in a new ``redis.Redis`` object for every publish and
every ack (``Channel._create_client``). Building one costs about 0.3 ms of CPU with
redis-py 8, more than sending the command (profiled under bench/chain.py). The object
holds no connection of its own, only the pool, so one per channel sends the same
commands over the same connections; it is dropped whenever kombu drops the pool (close,
fork, reconnect). The messages on the wire are kombu's own: Flower and plain Celery
producers with the stock transport share the queues unchanged.

It also takes kombu priorities up to :data:`cairn.workers.fairness.LEVELS` - 1 (kombu caps
them at 9): node messages are ordered by their run's priority and their namespace's share
(:mod:`cairn.workers.fairness`), one Redis list per level, the lowest served first.
"""

from __future__ import annotations

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

    def _disconnect_pools(self) -> None:
        self._cairn_client = None
        super()._disconnect_pools()

    def close(self) -> None:
        self._cairn_client = None
        super().close()


class Transport(kombu_redis.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
