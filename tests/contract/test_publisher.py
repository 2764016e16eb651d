"""The broker contract on both publishers: the in-process broker (the embedded default's)
and Celery over Redis (the fleet's). Each consumer stands where a worker would: the
in-process one is the broker's own worker threads, the Celery one reads the node queue
the way a worker does (JSON only, a ``cairn.node`` task call, acked after) without
starting one."""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
import redis
from celery import Celery
from kombu.serialization import loads

from cairn import clock
from cairn.config import Settings
from cairn.engine.outbox import Publisher
from cairn.lease.waits import current_wait
from cairn.model.messages import NodeMessage
from cairn.testing.publisher_contract import (
    QUIET_S,
    TAKE_S,
    Delivery,
    PublisherContract,
    bodies,
    numbered,
    sample_messages,
    wire,
)
from cairn.workers.app import (
    NODE_TASK,
    PUBLISHED_HEADER,
    SIBLINGS_HEADER,
    CeleryPublisher,
    make_celery,
)
from cairn.workers.fairness import BANDS, FAIR_HEADER, PRIORITY_STEPS, level, list_name
from cairn.workers.inprocess import InProcessBroker
from tests.contract.conftest import unavailable

# -- the in-process broker ------------------------------------------------------------------


class HeldThreads:
    """The in-process broker's worker threads, each held inside its handler with the
    message it took until :meth:`take` lets it go: what the test has not taken is either
    in a thread's hand or still in the broker's queue."""

    def __init__(self) -> None:
        self._handed: queue.Queue[Delivery] = queue.Queue()
        self._go_on = threading.Semaphore(0)
        self._released = False

    def handle(self, body: dict[str, Any]) -> None:
        """The runner's place: called on a worker thread with the message's body."""
        wait = current_wait()  # what the leases read when they take the lease
        published_at = None if wait is None else clock.wall() - wait
        self._handed.put(Delivery(body, published_at))
        if not self._released:
            self._go_on.acquire(timeout=TAKE_S * 4)

    @property
    def holding(self) -> int:
        return self._handed.qsize()

    def take(self, count: int, within_s: float = TAKE_S) -> list[Delivery]:
        deadline = time.monotonic() + within_s
        taken: list[Delivery] = []
        while len(taken) < count:
            try:
                taken.append(self._handed.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            self._go_on.release()
        return taken

    def release(self, threads: int) -> None:
        self._released = True
        for _ in range(threads):
            self._go_on.release()


class TestInProcessPublisher(PublisherContract):
    @pytest.fixture
    def consumer(self) -> HeldThreads:
        return HeldThreads()

    @pytest.fixture
    def publisher(self, consumer: HeldThreads) -> Iterator[Publisher]:
        broker = InProcessBroker(concurrency=2)
        broker.start(consumer.handle)
        yield broker
        consumer.release(broker.concurrency)
        broker.stop()

    @pytest.fixture
    def refusing_publisher(self) -> Publisher:
        return InProcessBroker()  # never started: a client process, with no worker threads


# -- Celery over Redis ----------------------------------------------------------------------


class NodeQueue:
    """A worker's side of the node queue, without a worker: one message at a time
    (``basic_get``, so nothing is prefetched and ``holding`` is always 0), decoded as
    Celery decodes it — JSON only — and acked once read."""

    holding = 0

    def __init__(self, app: Celery, queue_name: str) -> None:
        self._connection = app.connection_for_read()
        # Declared as a worker declares the queues it consumes, before anything is sent.
        self._queue = app.amqp.queues[queue_name].bind(self._connection.default_channel)
        self._queue.declare()

    def take(self, count: int, within_s: float = TAKE_S) -> list[Delivery]:
        deadline = time.monotonic() + within_s
        taken: list[Delivery] = []
        while len(taken) < count:
            message = self._queue.get(no_ack=False)
            if message is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
                continue
            taken.append(node_task_call(message))
            message.ack()
        return taken

    def close(self) -> None:
        self._connection.release()


def node_task_call(message: Any) -> Delivery:
    """The body of a ``cairn.node`` task call, or the test fails: what the worker's
    ``checked_strategy`` and ``run_node`` would accept, and nothing else."""
    assert message.content_type == "application/json", message.content_type
    assert message.headers["task"] == NODE_TASK, message.headers
    # accept= refuses any other serializer, as the worker's accept_content=["json"] does
    payload = loads(
        message.body, message.content_type, message.content_encoding, accept={"application/json"}
    )
    args, kwargs, _embed = payload
    assert kwargs == {} and len(args) == 1, payload
    published_at = message.headers.get(PUBLISHED_HEADER)
    return Delivery(
        args[0],
        float(published_at) if published_at is not None else None,
        message.headers.get(SIBLINGS_HEADER),
    )


@pytest.fixture
def broker_url(request: pytest.FixtureRequest) -> str:
    try:
        redis.Redis.from_url("redis://127.0.0.1:6379/0").ping()
    except redis.RedisError as error:
        unavailable("Redis", error)
    broker, _leases = request.getfixturevalue("redis_urls")  # flushed after the test
    return str(broker)


@contextmanager
def celery_app(broker_url: str, **env: str) -> Iterator[Celery]:
    app = make_celery(Settings.from_env({"CAIRN_BROKER_URL": broker_url, **env}))
    try:
        yield app
    finally:
        app.close()


class TestCeleryPublisher(PublisherContract):
    @pytest.fixture
    def app(self, broker_url: str) -> Iterator[Celery]:
        with celery_app(broker_url) as app:
            yield app

    @pytest.fixture
    def publisher(self, app: Celery) -> Publisher:
        return CeleryPublisher(app, app.cairn_settings.queue)

    @pytest.fixture
    def consumer(self, app: Celery) -> Iterator[NodeQueue]:
        # The queue `cairn worker` consumes (its --queues defaults to CAIRN_QUEUE).
        node_queue = NodeQueue(app, app.cairn_settings.queue)
        yield node_queue
        node_queue.close()

    @pytest.fixture
    def refusing_publisher(self) -> Iterator[Publisher]:
        # Nothing listens on port 1: the broker is down.
        with celery_app("redis://127.0.0.1:1/0") as app:
            yield CeleryPublisher(app, app.cairn_settings.queue)

    # -- beyond the contract: what this broker's messages look like ---------------------

    def test_the_messages_in_redis_are_json_not_pickle(
        self, publisher: Publisher, broker_url: str, app: Celery
    ) -> None:
        """The raw list entries, as any other client of the broker (Flower, a producer
        of its own) sees them: kombu's JSON envelope around a JSON task call."""
        messages = sample_messages()
        assert publisher.publish(messages)
        client = redis.Redis.from_url(broker_url)
        # kombu keeps the queue as a list per level (cairn.workers.fairness).
        queue = app.cairn_settings.queue
        raw = [e for step in PRIORITY_STEPS for e in client.lrange(list_name(queue, step), 0, -1)]
        client.close()
        assert len(raw) == len(messages)
        sent = []
        for entry in raw:
            envelope = json.loads(entry)  # a pickle is not JSON: this would raise
            assert envelope["content-type"] == "application/json"
            assert envelope["content-encoding"] == "utf-8"
            assert envelope["headers"]["task"] == NODE_TASK
            call = json.loads(base64.b64decode(envelope["body"]))
            assert call[1] == {}
            (body,) = call[0]
            sent.append(json.dumps(body, sort_keys=True))
            message = NodeMessage.from_dict(body)
            assert envelope["headers"]["shadow"] == message.task_name  # what Flower shows
            assert json.loads(envelope["headers"]["argsrepr"]) == [body]
            # Each in its run's priority's levels; the default namespace counted.
            band = envelope["properties"]["priority"] - level(message.priority)
            assert 0 <= band < BANDS
            assert envelope["headers"][FAIR_HEADER] == [queue, "default"]
        assert sorted(sent) == sorted(wire(m) for m in messages)

    def test_messages_go_to_the_configured_queue_only(self, broker_url: str) -> None:
        """CAIRN_QUEUE names the node queue for publishers and `cairn worker` alike."""
        with celery_app(broker_url, CAIRN_QUEUE="tenant-a") as app:
            publisher = CeleryPublisher(app, app.cairn_settings.queue)
            assert publisher.publish(numbered(3))
            assert publisher.backlog() == 3
            default = NodeQueue(app, Settings.from_env({}).queue)
            tenant = NodeQueue(app, "tenant-a")
            try:
                assert default.take(1, within_s=0.1) == []
                assert len(tenant.take(3)) == 3
            finally:
                default.close()
                tenant.close()

    def test_a_message_goes_to_the_queue_it_names(
        self, app: Celery, publisher: Publisher, consumer: NodeQueue
    ) -> None:
        """A node's ``queue`` picks the list its workers read (`cairn worker --queues
        gpu`): the default queue's consumer never sees it, and each queue's backlog
        counts its own messages only."""
        gpu = [replace(m, queue="gpu") for m in numbered(3, run_id="run-gpu")]
        plain = numbered(2)
        assert publisher.publish([*gpu, *plain])
        assert (publisher.backlog(), publisher.backlog("gpu")) == (2, 3)
        assert publisher.backlog("nobody-sends-here") == 0
        gpu_queue = NodeQueue(app, "gpu")
        try:
            assert bodies(consumer.take(5, within_s=QUIET_S)) == sorted(wire(m) for m in plain)
            assert bodies(gpu_queue.take(5, within_s=QUIET_S)) == sorted(wire(m) for m in gpu)
        finally:
            gpu_queue.close()
        assert (publisher.backlog(), publisher.backlog("gpu")) == (0, 0)

    def test_copies_deliver_every_message_more_than_once(
        self, app: Celery, consumer: NodeQueue
    ) -> None:
        """CAIRN_DUPLICATE_DELIVERIES (tests only) publishes each message twice."""
        publisher = CeleryPublisher(app, app.cairn_settings.queue, copies=2)
        messages = numbered(3)
        assert publisher.publish(messages)
        assert publisher.backlog() == 6
        assert bodies(consumer.take(6)) == sorted(wire(m) for m in messages * 2)
        assert consumer.take(1, within_s=QUIET_S) == []
