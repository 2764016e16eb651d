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

It counts each message it receives out of its namespace's share of the queue
(:mod:`cairn.workers.fairness`) in the transaction kombu makes to hold it unacknowledged,
not in a round trip of the worker's own.

It also takes kombu priorities up to :data:`cairn.workers.fairness.LEVELS` - 1 (kombu caps
them at 9): node messages are ordered by their run's priority and their namespace's share
(:mod:`cairn.workers.fairness`), one Redis list per level, the lowest served first.
"""

from __future__ import annotations

import logging
from time import monotonic, time
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps
from redis.exceptions import NoScriptError

from cairn.workers.fairness import FAIR_HEADER, LEVELS, TAKE, TAKE_SHA, TTL_S, taken_from

log = logging.getLogger(__name__)


class QoS(kombu_redis.QoS):
    def append(self, message: Any, delivery_tag: str) -> None:
        """kombu's (5.7): the message held unacknowledged — and, in the same transaction,
        counted out of its namespace's share of the queue it left
        (:mod:`cairn.workers.fairness`), instead of a round trip of its own."""
        delivery = message.delivery_info
        unacked = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
        taken = taken_from((message.headers or {}).get(FAIR_HEADER))
        with self.pipe_or_acquire() as pipe:
            pipe.zadd(self.unacked_index_key, {delivery_tag: time()})
            pipe.hset(self.unacked_key, delivery_tag, unacked)
            if taken is not None:  # EVALSHA, not a Script: no SCRIPT EXISTS before each
                pipe.evalsha(TAKE_SHA, 1, taken[0], taken[1], TTL_S)
            answers = pipe.execute(raise_on_error=False)
            virtual.QoS.append(self, message, delivery_tag)
        for answer in answers[:2]:
            if isinstance(answer, Exception):
                raise answer
        if taken is not None and isinstance(answers[2], Exception):
            self._take_again(taken, answers[2])

    def _take_again(self, taken: tuple[str, str], error: Exception) -> None:
        """The count, once more: loading the script if Redis lost it (a restart). Best
        effort — a count missed is mended when the queue is next found empty."""
        try:
            with self.channel.conn_or_acquire() as client:
                if isinstance(error, NoScriptError):
                    client.script_load(TAKE)
                client.evalsha(TAKE_SHA, 1, taken[0], taken[1], TTL_S)
        except Exception:
            log.warning("could not count a node message out of its queue", exc_info=True)


class Channel(kombu_redis.Channel):
    QoS = QoS
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
