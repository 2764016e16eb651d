"""The broker's contract: what the engine, the relay and recovery rely on from a
:class:`~cairn.engine.outbox.Publisher`, whichever broker is behind it. A published node
message reaches a worker as the JSON object it was sent as, every field intact, with the
time it was published; a batch arrives whole, from any number of threads at once; a
publisher that cannot hand messages on says so rather than letting the outbox mark them
sent; and the backlog counts the messages no worker has taken, because recovery leaves a
queued execution alone while that count is above zero. ``tests/contract`` runs it on the
in-process broker and on Celery over Redis.

Subclass :class:`PublisherContract` as ``Test...`` beside three fixtures:

- ``publisher``: a publisher whose queue starts empty, ready to take messages;
- ``consumer``: a :class:`Consumer` of what that publisher's workers would be handed;
- ``refusing_publisher``: one of the same kind whose broker cannot take messages (a
  broker that is down, or a process with no workers to hand them to).

Delivery is at least once and in any order (the lease and the idempotency table make
copies harmless), so nothing here depends on order; but a quiet broker in a test is
expected to deliver each message once, and the backlog to reach zero.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cairn import clock
from cairn.engine.outbox import Publisher
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage, Sibling, siblings_from_header
from cairn.scheduler.relay import BATCH  # a relay pass publishes up to this many at once

TAKE_S = 5.0  # the longest a published message may take to reach a consumer here
SETTLE_S = 2.0  # the longest the backlog may lag behind what a consumer took
QUIET_S = 0.2  # how long "nothing more arrives" is watched for
REFUSAL_S = 5.0  # a broker that is down must be given up on within this


@dataclass(frozen=True)
class Delivery:
    """One message as a worker's runner is handed it: the body it runs, and the time it
    was published (epoch seconds) as the lease wait histogram is told it."""

    body: dict[str, Any]
    published_at: float | None
    # The siblings the message carries, as its header names them (None: none).
    siblings: object = None

    def messages(self) -> list[NodeMessage]:
        """The message this delivery is, and each sibling it carries, as the worker runs
        them."""
        message = NodeMessage.from_dict(self.body)
        return replace(message, siblings=siblings_from_header(self.siblings)).spread()


class Consumer(Protocol):
    """What a publisher's workers would be handed. It takes messages only when asked,
    so that what it has not asked for waits in the queue (where the backlog counts it)."""

    @property
    def holding(self) -> int:
        """Messages taken from the queue but not yet handed out by :meth:`take` (a worker
        thread or a prefetch with one in hand): no longer waiting, not yet delivered."""
        ...

    def take(self, count: int, within_s: float = TAKE_S) -> list[Delivery]:
        """Up to ``count`` deliveries, in the order they were handed over; fewer if no
        more arrived within ``within_s``. Each is acknowledged: it does not come back."""
        ...


def sample_messages() -> list[NodeMessage]:
    """Every field in each of its forms: both phases, with and without an outbox id,
    resumed or not, numbers past 32 bits, names with text beyond ASCII."""
    return [
        NodeMessage("run-1", "orders", 1, "fetch", 1, 1),
        NodeMessage("run-1", "orders", 1, "fetch", 1, 2, Phase.RUN, outbox_id=41),
        NodeMessage("run-2", "orders", 3, "charge", 7, 2, Phase.COMPENSATE, 2**40, resumed=True),
        NodeMessage("run-3", "orders", 2, "ship", 2, 5, Phase.RUN, outbox_id=None, resumed=True),
        NodeMessage("räksmörgås-🦐", "überweisung", 12, "节点.zwei", 2**33, 9, Phase.COMPENSATE, 7),
    ]


def numbered(count: int, run_id: str = "run-batch") -> list[NodeMessage]:
    """``count`` distinct messages: one node per iteration, each with its outbox row."""
    return [
        NodeMessage(run_id, "batch", 1, "work", index, 1, outbox_id=index)
        for index in range(1, count + 1)
    ]


def wire(message: NodeMessage) -> str:
    """A message's body as canonical JSON text, to compare bodies field by field."""
    return json.dumps(message.to_dict(), sort_keys=True)


def bodies(deliveries: Iterable[Delivery]) -> list[str]:
    """The bodies delivered, as canonical JSON text, sorted (delivery order is free);
    ``json.dumps`` refuses what JSON cannot carry (bytes, sets, other objects)."""
    return sorted(json.dumps(delivery.body, sort_keys=True) for delivery in deliveries)


def eventually(check: Callable[[], bool], within_s: float = SETTLE_S) -> bool:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class PublisherContract:
    """What the engine relies on from a :class:`~cairn.engine.outbox.Publisher` backend
    (see the module's docstring for the fixtures a subclass supplies). A backend whose
    broker cannot count its queue sets ``counts_backlog = False``: its backlog must then
    be None, never a guess."""

    counts_backlog = True

    # -- what arrives -----------------------------------------------------------------------

    def test_a_message_arrives_as_it_was_sent(
        self, publisher: Publisher, consumer: Consumer
    ) -> None:
        messages = sample_messages()
        assert publisher.publish(messages) is True
        delivered = consumer.take(len(messages))
        assert bodies(delivered) == sorted(wire(m) for m in messages)
        for delivery in delivered:
            # What the worker does first with a body: refused whole if any field is off.
            message = NodeMessage.from_dict(delivery.body)
            assert message in messages
            assert delivery.body == message.to_dict()  # no field the format does not have
        assert consumer.take(1, within_s=QUIET_S) == []  # each message once

    def test_a_leads_siblings_reach_a_worker_carried_or_each_on_its_own(
        self, publisher: Publisher, consumer: Consumer
    ) -> None:
        """A fork's branches grouped (cairn.engine.grouping): a broker whose consumer
        costs nothing may spread them again, but none is lost or changed on the way."""
        lead, *siblings = numbered(4, run_id="run-fork")
        carrying = replace(lead, siblings=tuple(Sibling.from_message(s) for s in siblings))
        assert publisher.publish([carrying]) is True
        received: list[NodeMessage] = []
        while len(received) < 4 and (taken := consumer.take(1)):
            received += taken[0].messages()
        assert sorted(received, key=lambda m: m.iteration) == [lead, *siblings]
        assert consumer.take(1, within_s=QUIET_S) == []

    def test_a_message_carries_the_time_it_was_published(
        self, publisher: Publisher, consumer: Consumer
    ) -> None:
        """The lease wait histogram counts from it (:mod:`cairn.lease.waits`)."""
        before = clock.wall()
        assert publisher.publish([NodeMessage("run-1", "orders", 1, "fetch", 1, 1)])
        after = clock.wall()
        (delivery,) = consumer.take(1)
        assert delivery.published_at is not None
        assert before - 0.05 <= delivery.published_at <= after + 0.05

    def test_a_relay_batch_arrives_whole(self, publisher: Publisher, consumer: Consumer) -> None:
        messages = numbered(BATCH)
        assert publisher.publish(messages) is True
        delivered = consumer.take(BATCH)
        assert len(delivered) == BATCH
        assert bodies(delivered) == sorted(wire(m) for m in messages)
        assert consumer.take(1, within_s=QUIET_S) == []

    def test_batches_published_from_many_threads_at_once_all_arrive(
        self, publisher: Publisher, consumer: Consumer
    ) -> None:
        """Every worker thread and every API request publishes through the one
        publisher of its process."""
        threads, each = 8, 25
        batches = [numbered(each, run_id=f"run-{index}") for index in range(threads)]
        start = threading.Barrier(threads)
        answers: list[bool] = []

        def publish(batch: list[NodeMessage]) -> None:
            start.wait(timeout=TAKE_S)
            for message in batch:  # one message per call: the many small publishes of steps
                answers.append(publisher.publish([message]))

        workers = [threading.Thread(target=publish, args=(batch,)) for batch in batches]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=TAKE_S * 2)
        assert answers == [True] * (threads * each)
        delivered = consumer.take(threads * each)
        assert bodies(delivered) == sorted(wire(m) for batch in batches for m in batch)

    def test_an_empty_batch_publishes_nothing(
        self, publisher: Publisher, consumer: Consumer
    ) -> None:
        assert isinstance(publisher.publish([]), bool)
        assert consumer.take(1, within_s=QUIET_S) == []
        assert publisher.backlog() == (0 if self.counts_backlog else None)

    def test_a_publisher_whose_broker_cannot_take_them_says_so(
        self, refusing_publisher: Publisher
    ) -> None:
        """True would have the outbox mark the rows sent, and the relay would never send
        them: their nodes would wait for recovery instead. A refusal is False or an error
        (the outbox takes either as "not taken"), and it comes promptly: the step that
        published has committed and its worker is waiting to go on."""
        message = NodeMessage("run-1", "orders", 1, "fetch", 1, 1, outbox_id=1)
        started = time.monotonic()
        try:
            taken = refusing_publisher.publish([message])
        except Exception:  # the outbox catches it and leaves the rows to the relay
            taken = False
        assert taken is False
        assert time.monotonic() - started < REFUSAL_S

    # -- the backlog ------------------------------------------------------------------------

    def test_the_backlog_counts_the_messages_no_worker_has_taken(
        self, publisher: Publisher, consumer: Consumer
    ) -> None:
        """Recovery leaves a queued execution alone while the backlog is above zero, and
        sends it again once it is zero (or None: "cannot say"). A count stuck at zero
        would add a copy of the whole queue once per ``CAIRN_RECOVERY_AFTER``; one that
        never came down would hold back the recovery of a lost message ten times as long."""
        if not self.counts_backlog:
            assert publisher.backlog() is None
            assert publisher.publish(numbered(3))
            assert publisher.backlog() is None
            assert len(consumer.take(3)) == 3
            assert publisher.backlog() is None
            return
        assert publisher.backlog() == 0
        assert publisher.publish(numbered(5))

        def waiting(count: int) -> Callable[[], bool]:
            return lambda: publisher.backlog() == count - consumer.holding

        assert eventually(waiting(5)), (publisher.backlog(), consumer.holding)
        assert len(consumer.take(2)) == 2
        assert eventually(waiting(3)), (publisher.backlog(), consumer.holding)
        assert publisher.publish(numbered(4, run_id="run-more"))
        assert eventually(waiting(7)), (publisher.backlog(), consumer.holding)
        assert len(consumer.take(7)) == 7
        assert eventually(lambda: publisher.backlog() == 0), publisher.backlog()
        assert consumer.holding == 0
