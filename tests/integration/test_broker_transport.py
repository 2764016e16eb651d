"""cairn's kombu Redis transport against a real Redis: a consumer's poll is kombu's own
BRPOP — the same keys, one list per priority level of each queue, in the queue cycle's
order — though packed once; messages come back by priority, from every queue; and each
message received is held unacknowledged as kombu holds it and counted out of its
namespace's share of the queue in the same transaction, also once Redis has lost the
counting script."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import kombu
import pytest
import redis
from kombu.transport import redis as kombu_redis
from redis.connection import AbstractConnection, Encoder, PythonRespSerializer

from cairn.workers import transport
from cairn.workers.fairness import FAIR_HEADER, KEY_PREFIX, PRIORITY_STEPS, TAKE
from cairn.workers.transport import Channel, Transport


def _stock_brpop(channel: Channel, queues: list[str], timeout: float) -> list[Any]:
    keys = [
        kombu_redis.Channel._q_for_pri(channel, q, p)
        for p in channel.priority_steps
        for q in queues
    ]
    return ["BRPOP", *keys, timeout]


def test_a_poll_is_kombus_own_brpop_and_delivers_by_priority_from_every_queue(
    redis_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, _ = redis_urls
    options = {"priority_steps": PRIORITY_STEPS}
    with kombu.Connection(broker, transport=Transport, transport_options=options) as connection:
        queues = [kombu.Queue(name, routing_key=name) for name in ("q_one", "q_two")]
        with connection.Producer() as producer:
            for priority, queue in [(3, "q_one"), (60, "q_two"), (0, "q_one"), (88, "q_two")]:
                producer.publish(
                    {"priority": priority}, routing_key=queue, priority=priority,
                    declare=queues, serializer="json",
                )  # fmt: skip
        got: list[int] = []
        sent: list[bytes] = []
        original = AbstractConnection.send_packed_command

        def recording(self: Any, command: Any, check_health: bool = True) -> None:
            sent.append(b"".join(command) if isinstance(command, list) else command)
            original(self, command, check_health)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", recording)
        with connection.Consumer(queues, accept=["json"]) as consumer:
            channel = consumer.channel
            assert isinstance(channel, Channel)

            def received(body: dict[str, int], message: Any) -> None:
                got.append(body["priority"])
                message.ack()

            consumer.register_callback(received)
            while len(got) < 4:
                connection.drain_events(timeout=5)
    assert got == [0, 3, 60, 88]  # the lowest list first, whichever queue it is of
    brpops = [command for command in sent if b"BRPOP" in command]
    assert brpops, sent
    packer = PythonRespSerializer(65536, Encoder("utf-8", "strict", False).encode)
    stock = {
        b"".join(packer.pack(*_stock_brpop(channel, order, channel.brpop_timeout)))
        for order in (["q_one", "q_two"], ["q_two", "q_one"])
    }
    assert set(brpops) <= stock, "the poll differs from kombu's own BRPOP"


def test_a_received_message_is_held_unacked_and_counted_out_of_its_share_at_once(
    redis_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, _ = redis_urls
    client = redis.Redis.from_url(broker)
    counts = f"{KEY_PREFIX}q_fair"
    client.hset(counts, mapping={"acme": 3, "other": 1})
    # A counting script Redis has never seen, as after a restart (not SCRIPT FLUSH: the
    # server's scripts are every test's): the transport must load it.
    unseen = f"{TAKE}-- {uuid.uuid4()}\n"
    monkeypatch.setattr(transport, "TAKE", unseen)
    monkeypatch.setattr(transport, "TAKE_SHA", hashlib.sha1(unseen.encode()).hexdigest())
    options = {"priority_steps": PRIORITY_STEPS}
    with kombu.Connection(broker, transport=Transport, transport_options=options) as connection:
        queue = kombu.Queue("q_fair", routing_key="q_fair")
        with connection.Producer() as producer:
            for index, namespace in enumerate(["acme", "acme", "other"]):
                producer.publish(
                    {"n": index}, routing_key="q_fair", declare=[queue], serializer="json",
                    headers={FAIR_HEADER: ["q_fair", namespace]},
                )  # fmt: skip
            producer.publish({"n": 3}, routing_key="q_fair", serializer="json")  # no header
        held: list[Any] = []
        with connection.Consumer([queue], accept=["json"]) as consumer:
            channel = consumer.channel
            consumer.register_callback(lambda _body, message: held.append(message))
            while len(held) < 4:
                connection.drain_events(timeout=5)
            # Held as kombu holds them: restored to the queue if the worker dies now.
            assert client.hlen(channel.unacked_key) == 4
            assert client.zcard(channel.unacked_index_key) == 4
            # Counted out as received: one left of acme's three, other's gone.
            assert {k.decode(): int(v) for k, v in client.hgetall(counts).items()} == {"acme": 1}
            assert client.ttl(counts) > 0
            for message in held:
                message.ack()
            assert client.hlen(channel.unacked_key) == 0
